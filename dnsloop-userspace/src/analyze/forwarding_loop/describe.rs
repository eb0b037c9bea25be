//! Turning a cycle into a finding a person can act on.
use std::{net::IpAddr, time::SystemTime};

use crate::{
    analyze::{mnemonic, packet::QuestionKey},
    finding::{Hop, LoopFinding},
    observation::Namespace,
    points::NODE,
};

use super::flight::Flight;

/// What makes two detections the same loop: the question, and the namespaces that forwarded
/// it round, as a cycle (`node, pod` and `pod, node` are one loop seen from two places).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoopKey {
    question: QuestionKey,
    senders: Vec<Option<Namespace>>,
}

impl LoopKey {
    pub fn new(question: QuestionKey, cycle: &[&Flight]) -> Self {
        let senders: Vec<_> = cycle.iter().map(|flight| flight.origin.clone()).collect();
        // Whichever forward the cycle was first noticed at, start from the same one: the
        // rotation that sorts first.
        let senders = (0..senders.len())
            .map(|start| {
                let mut rotated = senders.clone();
                rotated.rotate_left(start);
                rotated
            })
            .min()
            .unwrap_or_default();
        Self { question, senders }
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
        "loop: {qname} {qtype} re-entered {home} after {route} ({hops} {hop_word}): {advice}",
        qtype = mnemonic::qtype(arrival.question.qtype),
        route = route(cycle),
        hops = path.len(),
        hop_word = if path.len() == 1 { "hop" } else { "hops" },
        advice = advice(home, arrival),
    );
    Some(LoopFinding {
        ts: at,
        qname,
        qtype: arrival.question.qtype,
        count: 1,
        path,
        servers,
        probe: arrival.probe,
        summary,
    })
}

/// `node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10`: each sender, then the address it
/// sent the question to.
fn route(cycle: &[&Flight]) -> String {
    let mut steps = Vec::with_capacity(cycle.len() * 2);
    for flight in cycle {
        steps.push(sender_name(flight.origin.as_ref()));
        steps.push(flight.server.ip().to_string());
    }
    steps.join(" -> ")
}

fn sender_name(namespace: Option<&Namespace>) -> String {
    namespace.map_or_else(|| "(unwatched)".to_owned(), Namespace::to_string)
}

/// The likely cause, from how the question came back to `home`.
fn advice(home: &Namespace, arrival: &Flight) -> String {
    let server = arrival.server.ip();
    if arrival.stayed_in(home) {
        return format!(
            "{home} forwards to its own loopback ({server}): give it an upstream outside itself in its resolv.conf"
        );
    }
    match &arrival.origin {
        Some(sender) if home.0.as_ref() == NODE => format!(
            "check the upstream (resolv.conf) that {sender} forwards to: {server} points back at the node-local cache (for CoreDNS, the kubelet resolvConf)"
        ),
        Some(sender) => format!("check the upstream (resolv.conf) that {sender} forwards to"),
        None => "the question came back through a resolver outside the watched namespaces: check where its upstreams forward to".to_owned(),
    }
}
