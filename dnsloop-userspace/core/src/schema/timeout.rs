//! `"kind": "timeout"`: queries a server left unanswered.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{Conntrack, DropCause, Timestamp};
use crate::{finding, present::mnemonic};

/// A query with no answer after `--timeout`, naming the server that did not answer. The first
/// time a server leaves a name of a domain unanswered it is reported at once (`count` 1); its
/// further timeouts for that domain's names (the name's siblings: `a.corp.example.` and
/// `b.corp.example.`) within the report interval are reported together when the interval ends
/// (`count` > 1), so that a dead server asked thousands of names makes one line per interval.
/// Queries of a question caught in a loop are counted in the loop's `unanswered` instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutRecord {
    /// When the (latest) query timed out.
    pub ts: Timestamp,
    /// The client of the latest query.
    pub client: SocketAddr,
    /// The server that did not answer, as the client addressed it.
    pub server: SocketAddr,
    /// The DNS message ID of the latest query.
    pub id: u16,
    /// Queries this reports: 1, or those since this server's previous report for the domain.
    pub count: u64,
    /// The (latest) question's name, with its trailing dot.
    pub qname: String,
    /// The (latest) question's type.
    pub qtype: String,
    /// `null` when every query counted asked `qname` `qtype`; else the domain all their names
    /// are in (`qname`'s parent), with its trailing dot.
    #[serde(default)]
    pub names_under: Option<String>,
    /// How long the latest query waited, in milliseconds.
    pub waited_ms: u64,
    /// Where the kernel dropped the latest query or its reply, and why; `null` when it saw no
    /// drop of either (or drops are not watched).
    pub dropped: Option<DropCause>,
    /// Conntrack's entry for the latest query's flow when it still translates the flow to a
    /// backend that nothing answers for (its pod gone): the stale entry, which the summary says
    /// how to delete; `null` otherwise (and in `analyze`, which reads no conntrack).
    #[serde(default)]
    pub stale_conntrack: Option<Conntrack>,
    /// The finding in one sentence.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

impl TimeoutRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::TimeoutFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            client: found.client,
            server: found.server,
            id: found.id,
            count: found.count,
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            names_under: found.names_under.clone(),
            waited_ms: u64::try_from(found.waited.as_millis()).unwrap_or(u64::MAX),
            dropped: found.dropped.as_ref().map(DropCause::new),
            stale_conntrack: found.stale_conntrack.as_ref().map(Conntrack::new),
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
