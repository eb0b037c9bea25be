//! `"kind": "lookup"`: a client's query slower than `--slow`, hop by hop.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{summary::millis, Timestamp};
use crate::{finding, present::mnemonic};

/// A client's query answered `--slow` or later, with the chain of forwards it caused on this
/// node (pod -> cache -> ClusterIP -> CoreDNS pod -> upstream) and the time spent at each: the
/// slowest hop is the one that took longest itself. At most 10 are written a second; the
/// summary's `lookups` counts the rest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LookupRecord {
    /// When the answer reached the client.
    pub ts: Timestamp,
    /// The question's name, with its trailing dot.
    pub qname: String,
    /// The question's type.
    pub qtype: String,
    /// The client that asked.
    pub client: SocketAddr,
    /// The server the client asked, as it addressed it.
    pub server: SocketAddr,
    /// The response code of the answer the client got.
    pub rcode: String,
    /// How long the client waited, in milliseconds.
    pub latency_ms: f64,
    /// The index in `hops` of the hop that took longest itself: where the time went.
    pub slowest: usize,
    /// The client's query first, then each forward it caused, in the order they were sent.
    pub hops: Vec<LookupHop>,
    /// Forwards answered beyond the 16 hops a lookup keeps, left out of `hops`.
    pub hops_left_out: u64,
    /// The lookup in one sentence: who waited how long, and the slowest hop.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

/// One query of a lookup, the client's or a forward, and the time spent at it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LookupHop {
    /// The namespace that sent it (`pod default/client`, `node`); `null` for a side that is
    /// not watched.
    pub from: Option<String>,
    /// Who sent it.
    pub src: SocketAddr,
    /// Where it was sent, as first seen (a ClusterIP, unless DNAT came before it was seen).
    pub server: SocketAddr,
    /// Where DNAT on the node delivered it instead; `null` when it was not rewritten or left
    /// the node.
    pub backend: Option<SocketAddr>,
    /// The namespace that received it (`pod kube-system/coredns-5d78c9869d-abcde`); `null`
    /// when it left the node.
    pub to: Option<String>,
    /// The interface it left the node by; `null` when it stayed on the node.
    pub via: Option<String>,
    /// The DNS message ID.
    pub id: u16,
    /// When it was sent.
    pub sent: Timestamp,
    /// When its reply came back to its sender.
    pub answered: Timestamp,
    /// The reply's response code.
    pub rcode: String,
    /// The index in `hops` of the query this one forwards; `null` for the client's.
    pub forwards: Option<usize>,
    /// From sent to answered, in milliseconds.
    pub latency_ms: f64,
    /// The time spent at this hop itself, in milliseconds: its latency less the time its own
    /// forwards were awaited.
    pub own_ms: f64,
}

impl LookupRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::LookupFinding, node: &str) -> Self {
        let client = found.client_query();
        Self {
            ts: found.ts.into(),
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            client: client.src,
            server: client.server,
            rcode: mnemonic::rcode(client.rcode).into_owned(),
            latency_ms: millis(client.latency()),
            slowest: found.slowest,
            hops: found.hops.iter().map(LookupHop::new).collect(),
            hops_left_out: found.hops_left_out,
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}

impl LookupHop {
    fn new(hop: &finding::LookupHop) -> Self {
        Self {
            from: hop.from.as_ref().map(ToString::to_string),
            src: hop.src,
            server: hop.server,
            backend: hop.backend,
            to: hop.to.as_ref().map(ToString::to_string),
            via: hop.via.as_deref().map(str::to_owned),
            id: hop.id,
            sent: hop.sent.into(),
            answered: hop.answered.into(),
            rcode: mnemonic::rcode(hop.rcode).into_owned(),
            forwards: hop.forwards,
            latency_ms: millis(hop.latency()),
            own_ms: millis(hop.own),
        }
    }
}
