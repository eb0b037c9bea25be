//! Where a capture shows servers answering: the evidence, in a capture, that a question sent to
//! an address in a namespace was taken in there.
//!
//! Live, the node says which addresses each namespace holds (netlink) and the kernel says which
//! queries it dropped. A capture says neither. What it does show is a reply that starts out in
//! a namespace from an address: a socket there answered from that address, so a question to
//! it can be received there. A reply that only passes through (a pod's answer routed by the
//! node, un-DNAT'ed there to the ClusterIP) shows nothing of the node, and is told apart by
//! having entered the namespace before it left. An address seen answering in one namespace is
//! that namespace's: a question to it that stays in another was routed on unseen (a capture
//! misses packets), not taken in there; loopback addresses, every namespace's own, excepted.
//! A query that a host sent back in an ICMP port or host unreachable was taken in nowhere. (A
//! query over TCP shows that some socket accepted its connection, but not in which namespace:
//! the node may route it on, unseen.)
//!
//! Queries show it too, where servers never answer (a loop's storm): a query that starts out in
//! a namespace from an address shows that the namespace holds it, as a reply does; only the
//! node is left out, unless the capture shows every interface it has, since the node routes
//! others' queries, whose way in a capture of some of its interfaces may miss. And in a capture
//! of every interface of the node (`tcpdump -i any`, [`AnsweredFrom::seeing_all_of`]), a query
//! that entered the node at an address and never left it was taken in there, unless some query
//! to that address was seen passing through: what the node routes, it sends on.
use std::{net::IpAddr, time::SystemTime};

use crate::{
    analyzers::{
        packet::MessageKey,
        table::{FastHash, Table},
    },
    observation::{DroppedMessage, Namespace, Observation},
    points::NODE,
};

/// Namespaces and addresses remembered; beyond them the stalest are forgotten, and questions
/// to them are reported as possible loops, never as loops.
const ADDRESS_CAPACITY: usize = 4096;

/// Replies remembered as having entered a namespace, to tell one passing through from one
/// starting there.
const REPLY_CAPACITY: usize = 65_536;

pub struct AnsweredFrom {
    answering: Table<(Namespace, IpAddr), SystemTime>,
    /// The addresses seen answering in some namespace (which ones, `answering` says).
    answering_anywhere: Table<IpAddr, ()>,
    /// Queries a host sent back in an ICMP destination unreachable: taken in nowhere.
    refused: Table<MessageKey, (), FastHash>,
    /// The namespace each recent reply last entered from elsewhere.
    entered: Table<MessageKey, Namespace, FastHash>,
    /// Where queries started out from: a namespace and the address it sent from; and the
    /// namespace each recent query last entered from elsewhere.
    sending: Table<(Namespace, IpAddr), ()>,
    query_entered: Table<MessageKey, Namespace, FastHash>,
    /// The namespace whose every interface the capture shows, if one does.
    seen_whole: Option<Namespace>,
    /// Queries that entered `seen_whole` and have not been seen leaving it, with the address
    /// they were sent to; and the addresses queries were seen passing through it to.
    inside: Table<MessageKey, IpAddr, FastHash>,
    passing_through: Table<IpAddr, ()>,
    /// What `settle` found `seen_whole` took in.
    taken_in: Table<IpAddr, ()>,
}

impl Default for AnsweredFrom {
    fn default() -> Self {
        Self {
            answering: Table::new(ADDRESS_CAPACITY),
            answering_anywhere: Table::new(ADDRESS_CAPACITY),
            refused: Table::with_hasher(REPLY_CAPACITY),
            entered: Table::with_hasher(REPLY_CAPACITY),
            sending: Table::new(ADDRESS_CAPACITY),
            query_entered: Table::with_hasher(REPLY_CAPACITY),
            seen_whole: None,
            inside: Table::with_hasher(REPLY_CAPACITY),
            passing_through: Table::new(ADDRESS_CAPACITY),
            taken_in: Table::new(ADDRESS_CAPACITY),
        }
    }
}

impl AnsweredFrom {
    /// Evidence from a capture that shows every interface of `namespace` (the node, in
    /// `tcpdump -i any`): what enters it and never leaves was taken in there.
    pub fn seeing_all_of(namespace: Namespace) -> Self {
        Self {
            seen_whole: Some(namespace),
            ..Self::default()
        }
    }

    /// For a query, whether it is addressed to where the namespace it enters was seen answering
    /// from, sending queries from, or, seen whole, taking queries in: `Some(true)` if so,
    /// `Some(false)` if the address was seen answering only in other namespaces, `None` (not
    /// known) otherwise.
    pub fn holds(&self, obs: &Observation) -> Option<bool> {
        if obs.is_response {
            return None;
        }
        let namespace = obs.point.enters.as_ref()?;
        if MessageKey::of(obs).is_some_and(|key| self.refused.get(&key).is_some()) {
            return Some(false);
        }
        let address = obs.dst.ip();
        let at = (namespace.clone(), address);
        if self.answering.get(&at).is_some() || self.sending.get(&at).is_some() {
            return Some(true);
        }
        if self.seen_whole.as_ref() == Some(namespace)
            && self.taken_in.get(&address).is_some()
            && self.passing_through.get(&address).is_none()
        {
            return Some(true);
        }
        let held_elsewhere =
            !address.is_loopback() && self.answering_anywhere.get(&address).is_some();
        held_elsewhere.then_some(false)
    }

    /// The capture was read through: the queries that entered the namespace seen whole and
    /// never left it were taken in there.
    pub fn settle(&mut self) {
        for (_, address) in self.inside.drain() {
            self.taken_in.insert(address, ());
        }
    }

    /// Learns from `obs`, a query: where it starts out from, and, in the namespace seen
    /// whole, whether it stays there.
    fn learn_query(&mut self, obs: &Observation) {
        let Some(key) = MessageKey::of(obs) else {
            return;
        };
        if let (Some(whole), Some(left)) = (&self.seen_whole, &obs.point.leaves) {
            if whole == left {
                if let Some(address) = self.inside.remove(&key) {
                    self.passing_through.insert(address, ());
                }
            }
        }
        let entered_before = self.query_entered.get(&key);
        // The crossing it already made, seen again at a second point (a bridge and its port).
        if entered_before.is_some() && entered_before == obs.point.enters.as_ref() {
            return;
        }
        if let Some(left) = &obs.point.leaves {
            let starts_here = entered_before != Some(left);
            let routes_unseen = *left.0 == *NODE && self.seen_whole.as_ref() != Some(left);
            // Every namespace sends from its own loopback: it shows no server there.
            if starts_here && !routes_unseen && !obs.src.ip().is_loopback() {
                self.sending.insert((left.clone(), obs.src.ip()), ());
            }
        }
        match &obs.point.enters {
            Some(entered) if obs.point.leaves.as_ref() != Some(entered) => {
                self.query_entered.insert(key.clone(), entered.clone());
                if self.seen_whole.as_ref() == Some(entered) {
                    self.inside.insert(key, obs.dst.ip());
                }
            }
            _ => {}
        }
    }

    /// Learns that `dropped`, a query a host sent back as undeliverable, was taken in nowhere.
    pub fn learn_refusal(&mut self, dropped: &DroppedMessage) {
        if let Some(key) = MessageKey::of_dropped_query(dropped) {
            self.refused.insert(key, ());
        }
    }

    /// Learns from `obs`.
    pub fn learn(&mut self, obs: &Observation) {
        if !obs.is_response {
            return self.learn_query(obs);
        }
        let Some(key) = MessageKey::of(obs) else {
            return;
        };
        let entered_before = self.entered.get(&key);
        // The crossing it already made, seen again at a second point (a bridge and its port).
        if entered_before.is_some() && entered_before == obs.point.enters.as_ref() {
            return;
        }
        if let Some(left) = &obs.point.leaves {
            let passed_through = entered_before == Some(left);
            if !passed_through {
                self.answering.insert((left.clone(), obs.src.ip()), obs.ts);
                self.answering_anywhere.insert(obs.src.ip(), ());
            }
        }
        match &obs.point.enters {
            Some(entered) if obs.point.leaves.as_ref() != Some(entered) => {
                self.entered.insert(key, entered.clone());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::points::NODE;
    use crate::testkit::observations::{
        query, reply, spot, Spot, CLIENT_IN, CLIENT_OUT, COREDNS, COREDNS_IN, COREDNS_LO,
        COREDNS_OUT, NODE_FROM_BRIDGE, NODE_FROM_UPLINK, NODE_LO, NODE_TO_BRIDGE, NODE_TO_UPLINK,
    };
    use dnsloop_shared::point::Direction::{Egress, Ingress};

    const NAME: &str = "www.example.test.";
    /// Where a capture of every interface places what it sees, by the addresses: the
    /// uplink's other side is the host at the address beyond it.
    const UPSTREAM: &str = "host 10.255.0.96";
    const FROM_UPSTREAM: Spot = spot("uplink", Ingress, Some(UPSTREAM), Some(NODE));
    const NODE_TO_UPSTREAM: Spot = spot("uplink", Egress, Some(NODE), Some(UPSTREAM));
    const NODE_TO_POD_AT_BRIDGE: Spot = spot("cni0", Egress, Some(NODE), Some(COREDNS));
    const NODE_TO_POD_AT_PORT: Spot = spot("veth-coredns-a", Egress, Some(NODE), Some(COREDNS));
    const POD_TO_NODE_AT_PORT: Spot = spot("veth-coredns-a", Ingress, Some(COREDNS), Some(NODE));

    #[test]
    fn a_reply_starting_in_a_namespace_shows_it_answers_from_that_address() {
        let mut answered = AnsweredFrom::default();
        let to_cache = query(NAME).id(1).seen(NODE_FROM_BRIDGE);
        assert_eq!(answered.holds(&to_cache), None, "nothing answered yet");
        let answer = reply(NAME)
            .id(1)
            .from("169.254.25.10:53")
            .to("10.244.0.2:41234")
            .seen(NODE_TO_BRIDGE);
        answered.learn(&answer);
        assert_eq!(answered.holds(&to_cache), Some(true));
    }

    #[test]
    fn a_reply_seen_leaving_at_a_bridge_and_its_port_shows_nothing_of_the_namespace() {
        // A capture of every interface places the bridge and the port by the addresses, so
        // the reply from beyond the uplink crosses from the node into the pod twice.
        let upstream = "10.255.0.96:53";
        let mut answered = AnsweredFrom::default();
        for spot in [FROM_UPSTREAM, NODE_TO_POD_AT_BRIDGE, NODE_TO_POD_AT_PORT] {
            let answer = reply(NAME).id(1).from(upstream).to("10.244.0.3:42278");
            answered.learn(&answer.seen(spot));
        }
        // A forward to the upstream that the capture saw enter the node, and never leave it.
        let forward = query(NAME).id(2).to(upstream).seen(POD_TO_NODE_AT_PORT);
        assert_eq!(
            answered.holds(&forward),
            Some(false),
            "the upstream answers beyond the uplink, not in the node"
        );
        let to_upstream = query(NAME).id(2).to(upstream).seen(NODE_TO_UPSTREAM);
        assert_eq!(answered.holds(&to_upstream), Some(true));
    }

    #[test]
    fn loopback_addresses_are_held_by_every_namespace() {
        let mut answered = AnsweredFrom::default();
        let node_stub = reply(NAME).id(1).from("127.0.0.1:53").to("127.0.0.1:41234");
        answered.learn(&node_stub.seen(NODE_LO));
        let to_stub_in_pod = query(NAME).id(2).to("127.0.0.1:53").seen(COREDNS_LO);
        assert_eq!(answered.holds(&to_stub_in_pod), None);
    }

    #[test]
    fn a_reply_passing_through_shows_nothing_of_the_namespace() {
        let mut answered = AnsweredFrom::default();
        let coredns = "10.244.0.3:53";
        let service = "10.96.0.10:53";
        let client = "10.244.0.2:41234";
        for (from, spot) in [
            (coredns, COREDNS_OUT),
            (coredns, NODE_FROM_BRIDGE),
            // Un-DNAT'ed by the node on its way to the client.
            (service, NODE_TO_BRIDGE),
            (service, CLIENT_IN),
        ] {
            answered.learn(&reply(NAME).id(1).from(from).to(client).seen(spot));
        }
        let to_service = query(NAME).id(2).to(service);
        assert_eq!(answered.holds(&to_service.clone().seen(CLIENT_OUT)), None);
        assert_eq!(answered.holds(&to_service.seen(NODE_FROM_BRIDGE)), None);
        let to_pod = query(NAME).id(2).to(coredns).seen(COREDNS_IN);
        assert_eq!(answered.holds(&to_pod), Some(true), "the pod answered");
    }

    #[test]
    fn a_query_starting_out_in_a_pod_shows_it_holds_the_address_it_sent_from() {
        let mut answered = AnsweredFrom::default();
        let coredns = "10.244.0.3:53";
        let to_pod = query(NAME).id(1).to(coredns).seen(COREDNS_IN);
        assert_eq!(answered.holds(&to_pod), None);
        let forward = query(NAME)
            .id(2)
            .from("10.244.0.3:40000")
            .to("169.254.25.10:53");
        answered.learn(&forward.seen(COREDNS_OUT));
        assert_eq!(answered.holds(&to_pod), Some(true));
    }

    #[test]
    fn the_node_is_not_taken_to_hold_what_it_may_route_unseen() {
        // Only the uplink was captured: the pod's query the node routes there seems to start
        // out in the node.
        let mut answered = AnsweredFrom::default();
        let routed = query(NAME)
            .id(1)
            .from("10.244.0.3:40000")
            .to("10.255.0.96:53");
        answered.learn(&routed.seen(NODE_TO_UPLINK));
        let to_pod = query(NAME).id(2).to("10.244.0.3:53").seen(NODE_FROM_UPLINK);
        assert_eq!(answered.holds(&to_pod), None);
    }

    #[test]
    fn a_node_seen_whole_takes_in_what_enters_it_and_never_leaves() {
        let mut answered = AnsweredFrom::seeing_all_of(Namespace::new(NODE));
        let cache = "169.254.25.10:53";
        let service = "10.96.0.10:53";
        // To the node-local cache: in, and never out.
        answered.learn(&query(NAME).id(1).to(cache).seen(POD_TO_NODE_AT_PORT));
        // To the ClusterIP: in, then out DNAT'ed to a pod.
        answered.learn(&query(NAME).id(2).to(service).seen(POD_TO_NODE_AT_PORT));
        answered.learn(
            &query(NAME)
                .id(2)
                .to("10.244.0.3:53")
                .seen(NODE_TO_POD_AT_PORT),
        );
        let to_cache = query(NAME).id(3).to(cache).seen(POD_TO_NODE_AT_PORT);
        let to_service = query(NAME).id(4).to(service).seen(POD_TO_NODE_AT_PORT);
        assert_eq!(answered.holds(&to_cache), None, "known once read through");
        answered.settle();
        assert_eq!(answered.holds(&to_cache), Some(true));
        assert_eq!(answered.holds(&to_service), None, "routed on");
        let unseen_whole = AnsweredFrom::default();
        assert_eq!(unseen_whole.holds(&to_cache), None);
    }
}
