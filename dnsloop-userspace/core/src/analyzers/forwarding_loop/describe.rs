//! Turning a cycle into a finding a person can act on.
use std::{net::IpAddr, time::SystemTime};

use dnsloop_shared::parse::Probe;

use crate::{
    analyzers::packet::QuestionKey,
    finding::{Hop, LoopFinding, LoopId, OffNode, Unconfirmable, Unconfirmed},
    observation::Namespace,
    points::NODE,
    present::{mnemonic, names::Names},
};

use super::flight::{Flight, Sighting};

/// What makes two detections the same loop: the question, and whether its cycle runs through
/// other nodes. A question caught in a loop between the node and two CoreDNS pods goes round
/// several cycles (node, pod A; node, pod B; and their combinations): for an operator that is
/// one loop, reported once with a count. When ClusterIPs lead to pods on other nodes too, some
/// rounds stay on the node and some leave it, and each kind is reported once: that the loop
/// crosses nodes is what sends the operator to the other nodes' findings (same `loop_id`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoopKey {
    question: QuestionKey,
    through_other_nodes: bool,
    /// A cycle with an unconfirmed delivery is reported apart: a possible loop, which pages
    /// no one, and a loop once the evidence is there.
    possible: bool,
    /// A storm whose path the capture does not show (see `storm`), reported apart from
    /// cycles.
    out_of_sight: bool,
}

impl LoopKey {
    pub fn new(question: QuestionKey, through_other_nodes: bool, possible: bool) -> Self {
        Self {
            question,
            through_other_nodes,
            possible,
            out_of_sight: false,
        }
    }

    /// The key of `question`'s storm out of sight.
    pub fn out_of_sight(question: QuestionKey) -> Self {
        Self {
            question,
            through_other_nodes: false,
            possible: true,
            out_of_sight: true,
        }
    }
}

/// The first report of a loop, whose chain showed `rounds` rounds. `cycle` holds the forwards
/// in the order they were sent; the last one is the arrival, at `at`.
pub fn loop_finding(
    cycle: &[&Flight],
    rounds: u64,
    at: SystemTime,
    names: &Names,
) -> Option<LoopFinding> {
    let arrival = cycle.last()?;
    let (home, _) = arrival.delivered_to()?;
    let mut path: Vec<Hop> = cycle
        .iter()
        .flat_map(|flight| flight.hops.iter().map(Sighting::hop))
        .collect();
    path.sort_by_key(|hop| hop.ts);
    let servers: Vec<IpAddr> = cycle.iter().map(|flight| flight.server().ip()).collect();
    let qname = arrival.question.name.presented(names);
    let off_node = off_node(cycle);
    let unconfirmed = unconfirmed(cycle);
    let kind = if unconfirmed.is_empty() {
        "loop"
    } else {
        "possible loop"
    };
    let mut summary = format!(
        "{kind}: {qname} {qtype}: {route} ({hops} {hop_word}): {advice}",
        qtype = mnemonic::qtype(arrival.question.qtype),
        route = route(&from_the_node(cycle)),
        hops = path.len(),
        hop_word = if path.len() == 1 { "hop" } else { "hops" },
        advice = advice(home, cycle, arrival),
    );
    if !off_node.is_empty() {
        summary.push_str(
            ". Part of the loop is off this node, out of sight: the tracers of the nodes it \
             crosses report it with the same loop_id",
        );
    }
    if !unconfirmed.is_empty() {
        summary.push_str(&format!(". {}", why_possible(&unconfirmed)));
    }
    let question = &arrival.question;
    Some(LoopFinding {
        ts: at,
        since: at,
        loop_id: LoopId::of_question_written(question, names),
        qname,
        qtype: question.qtype,
        count: rounds,
        unanswered: 0,
        path,
        off_node,
        servers,
        probe: arrival.probe,
        summary,
        dnat: Vec::new(),
        unconfirmed,
    })
}

/// The deliveries of `cycle` (its flights in the order sent, the arrival last) that lack
/// evidence; none in a loop.
///
/// Each delivery must be to an address its namespace is known to hold. And a round through
/// other nodes must show, on this node, the question forwarded from one namespace to another:
/// a question that only left a namespace and came back to it from other nodes may be other
/// nodes' clients asking that namespace what it asks its own upstream over the same device.
/// (Node-local loops through other nodes, the kubespray kind, pass through the node cache and a
/// CoreDNS pod on every node; and a loop probe's name is its sender's alone.)
pub fn unconfirmed(cycle: &[&Flight]) -> Vec<Unconfirmed> {
    let mut unconfirmed: Vec<Unconfirmed> = cycle
        .iter()
        .filter_map(|flight| flight.unconfirmed_delivery())
        .collect();
    let through_other_nodes = cycle.iter().any(|flight| flight.came_back());
    let forwarded_on_this_node = cycle.iter().any(|flight| {
        flight.origin().is_some()
            && flight
                .delivered_to()
                .is_some_and(|(namespace, _)| flight.origin() != Some(namespace))
    });
    let probe = cycle.iter().any(|flight| flight.probe != Probe::None);
    if through_other_nodes && !forwarded_on_this_node && !probe {
        let back = cycle.iter().rev().find(|flight| flight.came_back());
        if let Some((namespace, at)) = back.and_then(|flight| flight.delivered_to()) {
            unconfirmed.push(Unconfirmed {
                namespace: namespace.clone(),
                at,
                why: Unconfirmable::BackAtItsSender,
            });
        }
    }
    unconfirmed
}

/// Why a cycle is only a possible loop: `Not confirmed: nothing shows that node holds
/// 169.254.25.10 (its addresses were not listed, and no reply came from it there), so the
/// question may have been routed on or dropped there unseen`.
fn why_possible(unconfirmed: &[Unconfirmed]) -> String {
    let places: Vec<String> = unconfirmed
        .iter()
        .filter(|delivery| delivery.why == Unconfirmable::AddressNotShown)
        .map(|delivery| format!("{} holds {}", delivery.namespace, delivery.at.ip()))
        .collect();
    let mut why = Vec::new();
    if !places.is_empty() {
        why.push(format!(
            "nothing shows that {} (its addresses were not listed, and no reply came from it \
             there), so the question may have been routed on or dropped there unseen",
            places.join(", or that ")
        ));
    }
    for delivery in unconfirmed
        .iter()
        .filter(|delivery| delivery.why == Unconfirmable::BackAtItsSender)
    {
        why.push(format!(
            "the question came back from other nodes to {namespace}, which had sent it off the \
             node, and no namespace of this node forwarded it to another: clients on other \
             nodes asking {namespace} the same name look the same from here. The other nodes' \
             findings with this loop_id show whether it went round there",
            namespace = delivery.namespace
        ));
    }
    format!("Not confirmed: {}", why.join("; and "))
}

/// Each query of the cycle that left the node and the question it came back as.
fn off_node(cycle: &[&Flight]) -> Vec<OffNode> {
    cycle
        .windows(2)
        .filter_map(|pair| {
            let (sent, back) = (pair[0], pair[1]);
            let left = sent.departure()?;
            let arrived = back.hops.first().filter(|_| back.came_back())?;
            Some(OffNode {
                left_via: left.point.ifname.clone(),
                sent_to: left.dst.into(),
                back_from: arrived.src.into(),
                back_via: arrived.point.ifname.clone(),
            })
        })
        .collect()
}

/// The cycle's forwards starting with the node's, when the node is in it: a node-local cache
/// loop reads the same whichever pod it was first noticed at.
fn from_the_node<'a>(cycle: &[&'a Flight]) -> Vec<&'a Flight> {
    let start = cycle
        .iter()
        .position(|flight| is_node(flight.origin()))
        .unwrap_or(0);
    let mut rotated = cycle.to_vec();
    rotated.rotate_left(start);
    rotated
}

/// `node -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 (node)`: the first sender, then each
/// address the question was sent to and the namespace it reached there. What happened out of
/// sight is said as such: `node -> 10.244.1.3 via vxlan0 (off the node) ... back from
/// 10.244.1.0 via vxlan0 -> 10.244.0.3 (pod 10.244.0.3)`.
fn route(cycle: &[&Flight]) -> String {
    let Some(first) = cycle.first() else {
        return String::new();
    };
    let mut route = sender_name(first.origin());
    for flight in cycle {
        if let Some(arrived) = flight.hops.first().filter(|_| flight.came_back()) {
            route.push_str(&format!(
                " ... back from {} via {}",
                arrived.src.ip(),
                arrived.point.ifname
            ));
        }
        route.push_str(" -> ");
        match flight.departure() {
            Some(left) => route.push_str(&format!(
                "{} via {} (off the node)",
                left.dst.ip(),
                left.point.ifname
            )),
            None => route.push_str(&flight.server().ip().to_string()),
        }
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
    let server = arrival.server().ip();
    if arrival.stayed_in(home) {
        return format!(
            "{home} forwards to itself over loopback ({server}): give it an upstream outside itself \
             (its resolv.conf, or the Corefile's forward target)"
        );
    }
    // The edge that closes a node-local loop: a pod sending the question back to the node.
    let back_to_node = cycle.iter().find(|flight| {
        !is_node(flight.origin())
            && flight.origin().is_some()
            && flight
                .delivered_to()
                .is_some_and(|(namespace, _)| is_node(Some(namespace)))
    });
    if let Some(flight) = back_to_node {
        let sender = sender_name(flight.origin());
        return format!(
            "{sender} forwards to {server} on the node, which sends the question back: its upstream \
             points at the node-local cache; check the resolv.conf CoreDNS uses (kubelet resolvConf, \
             `forward . /etc/resolv.conf`)",
            server = flight.server().ip(),
        );
    }
    if cycle.iter().all(|flight| flight.origin() == Some(home)) {
        return format!(
            "{home} forwards to {server}, which leads back to itself (its own address, or a \
             ClusterIP that DNATs to it): give it an upstream outside itself"
        );
    }
    if arrival.origin().is_none() {
        return "the question came back through a resolver outside the watched namespaces: check \
                where its upstreams forward to"
            .to_owned();
    }
    let forwarders: Vec<String> = from_the_node(cycle)
        .iter()
        .map(|flight| sender_name(flight.origin()))
        .collect();
    format!("check where {} forward to", forwarders.join(", "))
}
