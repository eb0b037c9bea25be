//! What the analyzers report.
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_ebpf::{event::Direction, parse::Probe};

use crate::observation::{Namespace, Transport};

#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    Loop(LoopFinding),
    UnexpectedSource(UnexpectedSourceFinding),
    Timeout(TimeoutFinding),
}

/// One packet of a finding's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ts: SystemTime,
    pub ifname: Arc<str>,
    pub direction: Direction,
    /// The namespaces the packet left and entered at this hop, when watched (a pod, `node`).
    pub leaves: Option<Namespace>,
    pub enters: Option<Namespace>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    /// How the packet travelled: conntrack keys its flow by it.
    pub transport: Transport,
}

/// A question that re-entered a namespace along a chain of forwards.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopFinding {
    pub ts: SystemTime,
    /// Presentation format, as sent.
    pub qname: String,
    pub qtype: u16,
    /// How many times the question has re-entered a namespace so far.
    pub count: u64,
    /// Queries of the question that went unanswered while it looped, so far: counted here
    /// instead of reported as timeouts one by one.
    pub unanswered: u64,
    pub path: Vec<Hop>,
    /// The addresses the forwards in the cycle were sent to, in order.
    pub servers: Vec<IpAddr>,
    pub probe: Probe,
    pub summary: String,
    /// The destination NATs that conntrack applied to forwards on the path (none until an
    /// enricher looked), each once.
    pub dnat: Vec<Dnat>,
}

/// A forward's destination as its sender addressed it (a `ClusterIP`) and as conntrack's DNAT
/// rewrote it (a pod): `path` and `servers` show only the latter when the DNAT happened before
/// the first hop was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dnat {
    pub service: SocketAddr,
    pub backend: SocketAddr,
}

/// A response that matched a query by id and client address/port but came from another source.
#[derive(Clone, Debug, PartialEq)]
pub struct UnexpectedSourceFinding {
    pub ts: SystemTime,
    pub client: SocketAddr,
    pub expected: SocketAddr,
    pub actual: SocketAddr,
    pub id: u16,
    pub qname: String,
    pub qtype: u16,
    /// How the query and its reply travelled: conntrack keys the flow by it.
    pub transport: Transport,
    pub conntrack: Option<ConntrackEvidence>,
    pub cause: Option<String>,
    pub summary: String,
}

/// What conntrack knew about the query's flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConntrackEvidence {
    /// Where the client sent the query (the ClusterIP, before DNAT).
    pub original_dst: SocketAddr,
    /// Where the reply was expected from after DNAT (a CoreDNS pod).
    pub reply_src: SocketAddr,
    pub unreplied: bool,
}

/// A query that got no response in time, or several to one server for one question: after the
/// first, they are counted and reported together at most once per report interval.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeoutFinding {
    /// When the (latest) query timed out.
    pub ts: SystemTime,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub id: u16,
    /// How many queries this reports: 1, or those since the previous report (`client`, `id`
    /// and `ts` are the latest one's).
    pub count: u64,
    pub qname: String,
    pub qtype: u16,
    pub waited: Duration,
    pub summary: String,
}
