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
//! Queries show it too, where servers never answer (a loop's storm), in a capture of every
//! interface of the node (`tcpdump -i any`, [`AnsweredFrom::seeing_every_interface`]), which
//! sees whatever enters or leaves the node or a pod: a query that entered a namespace at an
//! address and never left it, and was followed at once (within `FORWARDED_WITHIN`) by a query
//! the namespace sent for the same question, was taken in there and forwarded. That a
//! namespace sends from an address shows nothing: the node sends from addresses where nothing
//! listens on port 53. A query dropped there unseen (nothing listening, and the kernel's ICMP
//! rate-limited away) is followed, if ever, by the client's retry, seconds later. Per address,
//! at least two must have been forwarded so, and all but one in ten and one more (`Stayed`);
//! and none seen passing through (DNAT, routing).
use std::{
    collections::VecDeque,
    net::IpAddr,
    time::{Duration, SystemTime},
};

use crate::{
    analyzers::{
        packet::{MessageKey, QuestionKey},
        table::{FastHash, Table},
    },
    observation::{DroppedMessage, Namespace, Observation},
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
    /// Whether the capture shows every interface of the node.
    every_interface: bool,
    /// Queries that entered a namespace and have not been seen leaving it; each question's
    /// latest of them in each namespace, to find the ones a query the namespace sends
    /// forwards; and the addresses queries were seen passing through a namespace to.
    inside: Table<MessageKey, Inside, FastHash>,
    entered_recently: Table<QuestionKey, VecDeque<Entry>, FastHash>,
    passing_through: Table<(Namespace, IpAddr), ()>,
    /// What `settle` found of the queries that stayed where they entered, by namespace and
    /// address: how many were forwarded at once, and how many not; and whether it has.
    stayed: Table<(Namespace, IpAddr), Stayed>,
    settled: bool,
}

/// A query that entered a namespace, when.
struct Entry {
    key: MessageKey,
    namespace: Namespace,
    at: SystemTime,
}

/// A query that entered a namespace, at an address.
struct Inside {
    at: (Namespace, IpAddr),
    forwarded: bool,
}

/// The queries to one address that stayed in its namespace.
#[derive(Default)]
struct Stayed {
    forwarded: u64,
    not_forwarded: u64,
}

impl Stayed {
    /// Whether they show a forwarder there: forwarded at once more than once (one may be a
    /// coincidence), and all but one in ten (a client asking it the same name just then) and
    /// the last (the round a loop ended on, or the capture did).
    fn taken_in(&self) -> bool {
        self.forwarded >= 2 && self.not_forwarded <= 1 + self.forwarded / 10
    }
}

/// How soon a forwarder sends on the question it took in: milliseconds; a client's retry comes
/// a second or more later.
const FORWARDED_WITHIN: Duration = Duration::from_millis(100);
/// Queries of one question entering namespaces kept to match a forward against.
const RECENT_ENTRIES: usize = 16;

impl Default for AnsweredFrom {
    fn default() -> Self {
        Self {
            answering: Table::new(ADDRESS_CAPACITY),
            answering_anywhere: Table::new(ADDRESS_CAPACITY),
            refused: Table::with_hasher(REPLY_CAPACITY),
            entered: Table::with_hasher(REPLY_CAPACITY),
            every_interface: false,
            inside: Table::with_hasher(REPLY_CAPACITY),
            entered_recently: Table::with_hasher(ADDRESS_CAPACITY),
            passing_through: Table::new(ADDRESS_CAPACITY),
            stayed: Table::new(ADDRESS_CAPACITY),
            settled: false,
        }
    }
}

impl AnsweredFrom {
    /// Evidence from a capture that shows every interface of the node (`tcpdump -i any`):
    /// what enters a namespace, never leaves and is forwarded at once was taken in there.
    pub fn seeing_every_interface() -> Self {
        Self {
            every_interface: true,
            ..Self::default()
        }
    }

    /// For a query, whether it is addressed to where the namespace it enters was seen answering
    /// from or, in a capture of every interface, taking queries in and forwarding them: `Some(true)` if so,
    /// `Some(false)` if the address was seen answering only in other namespaces, `None` (not
    /// known) otherwise.
    pub fn holds(&self, obs: &Observation) -> Option<bool> {
        if obs.is_response {
            return None;
        }
        let namespace = obs.point.enters.as_ref()?;
        // Refusals are rare: no key is made for every query to look for one.
        let refused = !self.refused.is_empty()
            && MessageKey::of(obs).is_some_and(|key| self.refused.get(&key).is_some());
        if refused {
            return Some(false);
        }
        let address = obs.dst.ip();
        let at = (namespace.clone(), address);
        if self.answering.get(&at).is_some() {
            return Some(true);
        }
        let taken_in = self.stayed.get(&at).is_some_and(Stayed::taken_in);
        if taken_in && self.passing_through.get(&at).is_none() {
            return Some(true);
        }
        let held_elsewhere =
            !address.is_loopback() && self.answering_anywhere.get(&address).is_some();
        held_elsewhere.then_some(false)
    }

    /// The capture was read through: the queries that entered the namespace seen whole and
    /// never left it were taken in there.
    pub fn settle(&mut self) {
        self.settled = true;
        self.entered_recently.drain().for_each(drop);
        let stayed: Vec<Inside> = self.inside.drain().map(|(_, inside)| inside).collect();
        for inside in stayed {
            if self.stayed.get(&inside.at).is_none() {
                self.stayed.insert(inside.at.clone(), Stayed::default());
            }
            if let Some(count) = self.stayed.get_mut(&inside.at) {
                if inside.forwarded {
                    count.forwarded += 1;
                } else {
                    count.not_forwarded += 1;
                }
            }
        }
    }

    /// `namespace` sent a query for `question` at `at`: it forwards the queries for it that
    /// entered there just before. Those are done with: a later query is later still.
    fn note_forward(&mut self, question: &QuestionKey, namespace: &Namespace, at: SystemTime) {
        let Some(recent) = self.entered_recently.get_mut(question) else {
            return;
        };
        let inside = &mut self.inside;
        recent.retain(|entry| {
            if entry.namespace != *namespace {
                return true;
            }
            let just_before = at
                .duration_since(entry.at)
                .is_ok_and(|gap| gap <= FORWARDED_WITHIN);
            if let Some(stayed) = inside.get_mut(&entry.key).filter(|_| just_before) {
                stayed.forwarded = true;
            }
            false
        });
    }

    /// `obs`, the query `key`, entered `namespace`: unless a server there was seen answering
    /// from its address already, which shows what this would.
    fn note_entry(&mut self, key: MessageKey, namespace: &Namespace, obs: &Observation) {
        let at = (namespace.clone(), obs.dst.ip());
        if self.answering.get(&at).is_some() {
            return;
        }
        let entry = Entry {
            key: key.clone(),
            namespace: namespace.clone(),
            at: obs.ts,
        };
        match self.entered_recently.refresh(&key.question) {
            Some(recent) => {
                if recent.len() == RECENT_ENTRIES {
                    recent.pop_front();
                }
                recent.push_back(entry);
            }
            None => {
                self.entered_recently
                    .insert(key.question.clone(), VecDeque::from([entry]));
            }
        }
        let inside = Inside {
            at,
            forwarded: false,
        };
        self.inside.insert(key, inside);
    }

    /// Learns from `obs`, a query, in a capture of every interface: where it entered and
    /// stayed, and whether it was forwarded from there.
    fn learn_query(&mut self, obs: &Observation) {
        // Once settled, what queries show is known: the analysis reads the capture again.
        if !self.every_interface || self.settled {
            return;
        }
        let Some(key) = MessageKey::of(obs) else {
            return;
        };
        if let Some(left) = &obs.point.leaves {
            let routed = self
                .inside
                .get(&key)
                .is_some_and(|inside| inside.at.0 == *left);
            if routed {
                // It entered `left` before: routed through.
                if let Some(inside) = self.inside.remove(&key) {
                    self.passing_through.insert(inside.at, ());
                }
            } else if obs.point.enters.as_ref() != Some(left) {
                self.note_forward(&key.question, left, obs.ts);
            }
        }
        if let Some(entered) = &obs.point.enters {
            if obs.point.leaves.as_ref() != Some(entered) {
                self.note_entry(key, entered, obs);
            }
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
    fn sending_from_an_address_shows_no_server_there() {
        // Only the uplink was captured: the pod's query the node routes there seems to start
        // out in the node; and the node sends from addresses where nothing listens on 53.
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
    fn with_every_interface_what_enters_never_leaves_and_is_forwarded_at_once_was_taken_in() {
        let mut answered = AnsweredFrom::seeing_every_interface();
        let cache = "169.254.25.10:53";
        let service = "10.96.0.10:53";
        let closed = "10.255.0.1:53";
        let at = |id, to: &str, ms| query(NAME).id(id).to(to).at_ms(ms);
        // To the node-local cache: in, never out, and the node forwards the question at once.
        answered.learn(&at(1, cache, 0).seen(POD_TO_NODE_AT_PORT));
        let forward = at(9, "10.244.0.3:53", 2).from("10.255.0.1:40000");
        answered.learn(&forward.seen(NODE_TO_POD_AT_PORT));
        // To the ClusterIP: in, then out DNAT'ed to the pod.
        answered.learn(&at(2, service, 3).seen(POD_TO_NODE_AT_PORT));
        answered.learn(&at(2, "10.244.0.3:53", 3).seen(NODE_TO_POD_AT_PORT));
        // The pod forwards the question at once in turn, the node again, the pod again: a
        // loop, until the capture ends.
        let pod_forward = at(11, cache, 4).from("10.244.0.3:50000");
        answered.learn(&pod_forward.seen(POD_TO_NODE_AT_PORT));
        let again = at(13, "10.244.0.3:53", 5).from("10.255.0.1:40002");
        answered.learn(&again.seen(NODE_TO_POD_AT_PORT));
        let pod_again = at(14, cache, 6).from("10.244.0.3:50001");
        answered.learn(&pod_again.seen(POD_TO_NODE_AT_PORT));
        // To a port nothing listens on: in, never out, and dropped unseen; the next query of
        // the node's own for the question is a client's retry, a second later. The node sends
        // from that address, which shows no server there.
        answered.learn(&at(3, closed, 10).seen(POD_TO_NODE_AT_PORT));
        let retry = at(10, "10.244.0.4:53", 1_010).from("10.255.0.1:40001");
        answered.learn(&retry.seen(NODE_TO_POD_AT_PORT));
        let asked = |id, to| query(NAME).id(id).to(to).seen(POD_TO_NODE_AT_PORT);
        assert_eq!(
            answered.holds(&asked(4, cache)),
            None,
            "known once read through"
        );
        answered.settle();
        assert_eq!(answered.holds(&asked(4, cache)), Some(true));
        assert_eq!(answered.holds(&asked(5, service)), None, "routed on");
        assert_eq!(answered.holds(&asked(6, closed)), None, "not forwarded");
        let to_pod = query(NAME).id(12).to("10.244.0.3:53");
        assert_eq!(
            answered.holds(&to_pod.seen(NODE_TO_POD_AT_PORT)),
            Some(true)
        );
        let unseen_whole = AnsweredFrom::default();
        assert_eq!(unseen_whole.holds(&asked(4, cache)), None);
    }
}
