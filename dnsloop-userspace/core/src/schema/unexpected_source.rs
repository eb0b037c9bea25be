//! `"kind": "unexpected_source"`: a reply that came from another address than its query went to.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{finding, present::mnemonic};

/// A reply that matched a query by ID and client address but came from another source, so
/// the client's socket drops it (typically a reply that skipped un-DNAT:
/// `bridge-nf-call-iptables=0`). Reported when found, then at most once per
/// `--report-interval` while it goes on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnexpectedSourceRecord {
    /// When the reply was seen.
    pub ts: Timestamp,
    /// The client that asked.
    pub client: SocketAddr,
    /// Where the client sent its query, so where the reply had to come from.
    pub expected: SocketAddr,
    /// Where the reply came from.
    pub actual: SocketAddr,
    /// The DNS message ID of the query and the reply.
    pub id: u16,
    /// The question's name, with its trailing dot.
    pub qname: String,
    /// The question's type.
    pub qtype: String,
    /// What conntrack knew about the query's flow; `null` when it was not asked or knew
    /// nothing.
    pub conntrack: Option<Conntrack>,
    /// Why, when the node's settings say (`reply bypassed un-DNAT:
    /// bridge-nf-call-iptables=0`); else `null`.
    pub cause: Option<String>,
    /// The finding in one sentence, with the fix when known.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

/// Conntrack's entry for a query's flow: an unexpected reply's, or a timed-out query's stale one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conntrack {
    /// Where the client sent the query (a ClusterIP, before DNAT).
    pub original_dst: SocketAddr,
    /// Where conntrack expected the reply from after DNAT (a CoreDNS pod).
    pub reply_src: SocketAddr,
    /// Whether conntrack never saw a reply on the flow.
    pub unreplied: bool,
}

impl Conntrack {
    /// `evidence`, as an enricher found it.
    pub fn new(evidence: &finding::ConntrackEvidence) -> Self {
        Self {
            original_dst: evidence.original_dst,
            reply_src: evidence.reply_src,
            unreplied: evidence.unreplied,
        }
    }
}

impl UnexpectedSourceRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::UnexpectedSourceFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            client: found.client,
            expected: found.expected,
            actual: found.actual,
            id: found.id,
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            conntrack: found.conntrack.as_ref().map(Conntrack::new),
            cause: found.cause.clone(),
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
