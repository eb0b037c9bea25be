//! Where a capture shows servers answering: the evidence, in a capture, that a question sent to
//! an address in a namespace was taken in there.
//!
//! Live, the node says which addresses each namespace holds (netlink) and the kernel says which
//! queries it dropped. A capture says neither. What it does show is a reply that starts out in
//! a namespace from an address: a socket there answered from that address, so a question to
//! it can be received there. A reply that only passes through (a pod's answer routed by the
//! node, un-DNAT'ed there to the ClusterIP) shows nothing of the node, and is told apart by
//! having entered the namespace before it left. A query that a host sent back in an ICMP port
//! or host unreachable was taken in nowhere. (A query over TCP shows that some socket accepted
//! its connection, but not in which namespace: the node may route it on, unseen.)
use std::{net::IpAddr, time::SystemTime};

use crate::{
    analyzers::{
        packet::MessageKey,
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
    /// Queries a host sent back in an ICMP destination unreachable: taken in nowhere.
    refused: Table<MessageKey, (), FastHash>,
    /// The namespace each recent reply last entered from elsewhere.
    entered: Table<MessageKey, Namespace, FastHash>,
}

impl Default for AnsweredFrom {
    fn default() -> Self {
        Self {
            answering: Table::new(ADDRESS_CAPACITY),
            refused: Table::with_hasher(REPLY_CAPACITY),
            entered: Table::with_hasher(REPLY_CAPACITY),
        }
    }
}

impl AnsweredFrom {
    /// For a query, whether it is addressed to where a server in the namespace it enters was
    /// seen answering: `Some(true)` if so, `None` (not known) otherwise, since a capture cannot
    /// show that a namespace does not hold an address.
    pub fn holds(&self, obs: &Observation) -> Option<bool> {
        if obs.is_response {
            return None;
        }
        let namespace = obs.point.enters.as_ref()?;
        if MessageKey::of(obs).is_some_and(|key| self.refused.get(&key).is_some()) {
            return Some(false);
        }
        self.answering
            .get(&(namespace.clone(), obs.dst.ip()))
            .map(|_| true)
    }

    /// Learns that `dropped`, a query a host sent back as undeliverable, was taken in nowhere.
    pub fn learn_refusal(&mut self, dropped: &DroppedMessage) {
        if let Some(key) = dropped.query_key() {
            self.refused.insert(key, ());
        }
    }

    /// Learns from `obs` if it is a reply.
    pub fn learn(&mut self, obs: &Observation) {
        let Some(key) = MessageKey::of(obs).filter(|_| obs.is_response) else {
            return;
        };
        if let Some(left) = &obs.point.leaves {
            let passed_through = self.entered.get(&key) == Some(left);
            if !passed_through {
                self.answering.insert((left.clone(), obs.src.ip()), obs.ts);
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
    use crate::analyzers::testkit::{
        query, reply, CLIENT_IN, CLIENT_OUT, COREDNS_IN, COREDNS_OUT, NODE_FROM_BRIDGE,
        NODE_TO_BRIDGE,
    };

    const NAME: &str = "www.example.test.";

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
}
