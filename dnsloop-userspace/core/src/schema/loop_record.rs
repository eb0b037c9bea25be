//! `"kind": "loop"`: a forwarding loop, when found and then while it goes on; `"kind":
//! "possible_loop"`: the same where part of the evidence is missing.
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{
    finding,
    present::{mnemonic, probe_name},
};

/// A question that re-entered a network namespace along a chain of forwards: reported when
/// found, then at most once per `--report-interval` while it goes on, with its count so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopRecord {
    /// When this report was written (the packet time of the round that prompted it).
    pub ts: Timestamp,
    /// A hash of the question (name folded to lower case, type, class) in 16 hex digits: the
    /// same on every node the loop crosses, so that a log pipeline can group its reports. With
    /// `--redact-names`, keyed like the names (the same on nodes sharing the key).
    pub loop_id: String,
    /// When the loop was first reported; equal to `ts` in its first report.
    pub since: Timestamp,
    /// The looping question's name, with its trailing dot, escaped as dig escapes it.
    pub qname: String,
    /// The question's type (`A`, `HINFO`, `TYPE65280`).
    pub qtype: String,
    /// How many times the question has re-entered a namespace so far (rounds seen).
    pub count: u64,
    /// Rounds per second since the loop was first reported; `null` until a second has passed.
    pub rounds_per_s: Option<f64>,
    /// Queries of the question that went unanswered while it looped, so far: counted here,
    /// not reported as timeouts.
    pub unanswered: u64,
    /// One round of the loop, packet by packet, as seen on this node.
    pub path: Vec<Hop>,
    /// Where the round left this node and came back, out of sight on other nodes, in order.
    pub off_node: Vec<OffNode>,
    /// The addresses the forwards of the round were sent to, in order.
    pub servers: Vec<IpAddr>,
    /// `coredns` or `dnsmasq` when the question is that server's loop-detection probe, else
    /// `null`.
    pub probe: Option<String>,
    /// The loop in one sentence: the chain of forwards and what to check.
    pub summary: String,
    /// The destination NATs conntrack applied to forwards of the path (a ClusterIP to a
    /// pod), each once; empty where conntrack was not asked (`analyze`).
    pub dnat: Vec<Dnat>,
    /// Where the question stayed without evidence that a server took it in; empty in a `loop`,
    /// never in a `possible_loop`.
    pub unconfirmed: Vec<Unconfirmed>,
    /// The node this was seen on: `NODE_NAME`, else the host name.
    pub node: String,
}

/// One packet of a loop's path, where it was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// When the packet was seen.
    pub ts: Timestamp,
    /// The interface it was seen on.
    pub ifname: String,
    /// `ingress` or `egress`, as the interface saw it.
    pub dir: String,
    /// Who sent it.
    pub src: SocketAddr,
    /// Where it was going (after any DNAT seen before this hop).
    pub dst: SocketAddr,
    /// The DNS message ID.
    pub id: u16,
    /// The namespace the packet left here (`node`, `pod 10.244.0.3`, `pod
    /// kube-system/coredns-5d78c9869d-abcde`); `null` for a side that is not watched.
    pub leaves: Option<String>,
    /// The namespace the packet entered here; `null` for a side that is not watched.
    pub enters: Option<String>,
}

/// Where a loop's round went out of sight and came back: a query that left the node over
/// `left_via` to `sent_to`, and the question coming back from `back_from` over `back_via`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffNode {
    /// The interface the query left the node by (the overlay device, an uplink).
    pub left_via: String,
    /// Where it was sent.
    pub sent_to: SocketAddr,
    /// The address the question came back from.
    pub back_from: SocketAddr,
    /// The interface it came back by.
    pub back_via: String,
}

/// A namespace a question of the cycle stayed in, addressed to an address nothing showed the
/// namespace holds (its addresses are not known, as in a capture, where no reply came from
/// it there): the question may have been routed on, or dropped there, unseen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unconfirmed {
    /// The namespace (`node`, `pod 10.244.0.3`).
    pub namespace: String,
    /// The address the question was sent to there.
    pub at: SocketAddr,
    /// What is missing: `address_not_shown` (nothing shows that the namespace holds the
    /// address: its addresses are not known and no reply came from it there),
    /// `back_at_its_sender` (the question came back from other nodes to the namespace that had
    /// sent it off the node, and no namespace of this node forwarded it to another: other
    /// nodes' clients asking it look the same; their tracers' findings tell), or
    /// `path_not_shown` (the capture shows the question storm across one interface both ways,
    /// under new ids and never answered, but not the path it goes round: `path` holds a few
    /// of its crossings, `at` one of its destinations).
    pub why: String,
}

/// A forward's destination as its sender addressed it and as conntrack's DNAT rewrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dnat {
    /// The address the forward was sent to (a ClusterIP).
    pub service: SocketAddr,
    /// The address DNAT sent it to instead (a pod).
    pub backend: SocketAddr,
}

impl LoopRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::LoopFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            loop_id: found.loop_id.to_string(),
            since: found.since.into(),
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            count: found.count,
            rounds_per_s: found.rounds_per_second(),
            unanswered: found.unanswered,
            path: found.path.iter().map(Hop::new).collect(),
            off_node: found.off_node.iter().map(OffNode::new).collect(),
            servers: found.servers.clone(),
            probe: probe_name(found.probe).map(str::to_owned),
            summary: found.summary.clone(),
            dnat: found.dnat.iter().map(Dnat::new).collect(),
            unconfirmed: found
                .unconfirmed
                .iter()
                .map(|delivery| Unconfirmed {
                    namespace: delivery.namespace.to_string(),
                    at: delivery.at,
                    why: delivery.why.as_str().to_owned(),
                })
                .collect(),
            node: node.to_owned(),
        }
    }
}

impl Hop {
    pub fn new(hop: &finding::Hop) -> Self {
        Self {
            ts: hop.ts.into(),
            ifname: hop.point.ifname.to_string(),
            dir: hop.point.direction.as_str().to_owned(),
            src: hop.src,
            dst: hop.dst,
            id: hop.id,
            leaves: hop.point.leaves.as_ref().map(ToString::to_string),
            enters: hop.point.enters.as_ref().map(ToString::to_string),
        }
    }
}

impl OffNode {
    pub fn new(off_node: &finding::OffNode) -> Self {
        Self {
            left_via: off_node.left_via.to_string(),
            sent_to: off_node.sent_to,
            back_from: off_node.back_from,
            back_via: off_node.back_via.to_string(),
        }
    }
}

impl Dnat {
    pub fn new(dnat: &finding::Dnat) -> Self {
        Self {
            service: dnat.service,
            backend: dnat.backend,
        }
    }
}
