//! `"kind": "truncated_not_retried"`: truncated answers a client took as they were.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{finding, present::mnemonic};

/// An answer with TC set (cut to fit in UDP) reached its client, and the client did not ask the
/// question again over TCP within `--timeout`: it uses the cut answer, with fewer records than
/// exist or none, as musl's resolver before 1.2.4 does. A client's first such answer from a
/// server is reported at once; its further ones from that server within the report interval
/// are reported together when the next one is judged, or at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruncationRecord {
    /// When the wait for the (latest) retry ended.
    pub ts: Timestamp,
    /// The client's query that got the first truncated answer reported.
    pub client: SocketAddr,
    /// The namespace the client's query came from (`pod default/alpine`); `null` when it is
    /// not watched.
    pub client_namespace: Option<String>,
    /// The server the client asked, as it addressed it.
    pub server: SocketAddr,
    /// The DNS message ID of the first query reported.
    pub id: u16,
    /// Truncated answers not retried this reports: 1, or all so far from this server to this
    /// client.
    pub count: u64,
    /// The question's name, with its trailing dot.
    pub qname: String,
    /// The question's type.
    pub qtype: String,
    /// Bytes of the truncated answer.
    pub size: usize,
    /// How long a retry over TCP was awaited, in milliseconds.
    pub waited_ms: u64,
    /// The finding in one sentence, with the fix.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

impl TruncationRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::TruncationFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            client: found.client,
            client_namespace: found.client_namespace.as_ref().map(ToString::to_string),
            server: found.server,
            id: found.id,
            count: found.count,
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            size: found.size,
            waited_ms: u64::try_from(found.waited.as_millis()).unwrap_or(u64::MAX),
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
