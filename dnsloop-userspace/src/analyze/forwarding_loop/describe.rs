//! Turning a cycle into a finding a person can act on.
use std::{net::IpAddr, time::SystemTime};

use crate::{
    analyze::{mnemonic, packet::QuestionKey},
    finding::{Hop, LoopFinding},
    observation::Namespace,
    points::NODE,
};

use super::flight::Flight;

/// What makes two detections the same loop: the question. A question caught in a loop between
/// the node and two CoreDNS pods goes round several cycles (node, pod A; node, pod B; and their
/// combinations): for an operator that is one loop, reported once with a count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoopKey {
    question: QuestionKey,
}

impl LoopKey {
    pub fn new(question: QuestionKey) -> Self {
        Self { question }
    }
}

/// The first report of a loop. `cycle` holds the forwards in the order they were sent; the
/// last one is the arrival, at `at`.
pub fn loop_finding(cycle: &[&Flight], at: SystemTime) -> Option<LoopFinding> {
    let arrival = cycle.last()?;
    let (home, _) = arrival.delivered_to()?;
    let mut path: Vec<Hop> = cycle
        .iter()
        .flat_map(|flight| flight.hops.iter().cloned())
        .collect();
    path.sort_by_key(|hop| hop.ts);
    let servers: Vec<IpAddr> = cycle.iter().map(|flight| flight.server.ip()).collect();
    let qname = arrival.question.name.presentation();
    let summary = format!(
        "loop: {qname} {qtype}: {route} ({hops} {hop_word}): {advice}",
        qtype = mnemonic::qtype(arrival.question.qtype),
        route = route(&from_the_node(cycle)),
        hops = path.len(),
        hop_word = if path.len() == 1 { "hop" } else { "hops" },
        advice = advice(home, cycle, arrival),
    );
    Some(LoopFinding {
        ts: at,
        qname,
        qtype: arrival.question.qtype,
        count: 1,
        unanswered: 0,
        path,
        servers,
        probe: arrival.probe,
        summary,
        dnat: Vec::new(),
    })
}

/// The cycle's forwards starting with the node's, when the node is in it: a node-local cache
/// loop reads the same whichever pod it was first noticed at.
fn from_the_node<'a>(cycle: &[&'a Flight]) -> Vec<&'a Flight> {
    let start = cycle
        .iter()
        .position(|flight| is_node(flight.origin.as_ref()))
        .unwrap_or(0);
    let mut rotated = cycle.to_vec();
    rotated.rotate_left(start);
    rotated
}

/// `node -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 (node)`: the first sender, then each
/// address the question was sent to and the namespace it reached there.
fn route(cycle: &[&Flight]) -> String {
    let Some(first) = cycle.first() else {
        return String::new();
    };
    let mut route = sender_name(first.origin.as_ref());
    for flight in cycle {
        route.push_str(" -> ");
        route.push_str(&flight.server.ip().to_string());
        if let Some((namespace, _)) = flight.delivered_to() {
            route.push_str(&format!(" ({namespace})"));
        }
    }
    route
}

fn sender_name(namespace: Option<&Namespace>) -> String {
    namespace.map_or_else(|| "(unwatched)".to_owned(), Namespace::to_string)
}

fn is_node(namespace: Option<&Namespace>) -> bool {
    namespace.is_some_and(|namespace| namespace.0.as_ref() == NODE)
}

/// The likely cause, from how the question came back to `home`.
fn advice(home: &Namespace, cycle: &[&Flight], arrival: &Flight) -> String {
    let server = arrival.server.ip();
    if arrival.stayed_in(home) {
        return format!(
            "{home} forwards to itself over loopback ({server}): give it an upstream outside itself \
             (its resolv.conf, or the Corefile's forward target)"
        );
    }
    // The edge that closes a node-local loop: a pod sending the question back to the node.
    let back_to_node = cycle.iter().find(|flight| {
        !is_node(flight.origin.as_ref())
            && flight.origin.is_some()
            && flight
                .delivered_to()
                .is_some_and(|(namespace, _)| is_node(Some(namespace)))
    });
    if let Some(flight) = back_to_node {
        let sender = sender_name(flight.origin.as_ref());
        return format!(
            "{sender} forwards to {server} on the node, which sends the question back: its upstream \
             points at the node-local cache; check the resolv.conf CoreDNS uses (kubelet resolvConf, \
             `forward . /etc/resolv.conf`)",
            server = flight.server.ip(),
        );
    }
    if cycle
        .iter()
        .all(|flight| flight.origin.as_ref() == Some(home))
    {
        return format!(
            "{home} forwards to {server}, which leads back to itself (its own address, or a \
             ClusterIP that DNATs to it): give it an upstream outside itself"
        );
    }
    if arrival.origin.is_none() {
        return "the question came back through a resolver outside the watched namespaces: check \
                where its upstreams forward to"
            .to_owned();
    }
    let forwarders: Vec<String> = from_the_node(cycle)
        .iter()
        .map(|flight| sender_name(flight.origin.as_ref()))
        .collect();
    format!("check where {} forward to", forwarders.join(", "))
}
