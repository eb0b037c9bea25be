//! `"kind": "servfail_storm"`: a server answering SERVFAIL at a high rate.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::finding;

/// A server answering SERVFAIL at least 10 times a second over 5 seconds, and in at least a
/// fifth of its answers, as its clients received them, with what failed on the node in the
/// same seconds. Reported when found, then at most once per report interval while it goes on,
/// and at the end. Seen where every DNS packet is analysed: `analyze`, and `trace` with
/// `--slow` or `--packets`; `dnsloop_answers_total{rcode="SERVFAIL"}` counts every one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServfailRecord {
    /// When the latest second counted was judged.
    pub ts: Timestamp,
    /// When the storm was first reported.
    pub since: Timestamp,
    /// The server, as its clients addressed it.
    pub server: SocketAddr,
    /// SERVFAIL answers a second over the latest 5 seconds.
    pub per_second: f64,
    /// Their share of the server's answers in those seconds, 0 to 1.
    pub share: f64,
    /// Seconds of the storm so far.
    pub seconds: u64,
    /// Other servers found storming in the same seconds (at most 8): in a chain of forwards
    /// each passes the SERVFAIL of the one it forwards to on, so the one furthest upstream is
    /// where it starts.
    pub also_storming: Vec<SocketAddr>,
    /// Servers whose queries timed out in those seconds, largest first (at most 8): a
    /// forwarder's SERVFAIL is often its upstream's silence.
    pub timeouts_behind: Vec<Behind>,
    /// DNS packets the kernel dropped in those seconds, by reason, largest first (at most 8).
    pub drops_behind: Vec<Behind>,
    /// The finding in one sentence.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

/// Something that failed in a storm's seconds, and how often.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Behind {
    /// A server (`ip:port`) or a drop reason.
    pub what: String,
    /// Queries timed out, or packets dropped.
    pub count: u64,
}

impl ServfailRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::ServfailFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            since: found.since.into(),
            server: found.server,
            per_second: found.per_second,
            share: found.share,
            seconds: found.seconds,
            also_storming: found.also_storming.clone(),
            timeouts_behind: found
                .timeouts_behind
                .iter()
                .map(|(server, count)| Behind {
                    what: server.to_string(),
                    count: *count,
                })
                .collect(),
            drops_behind: found
                .drops_behind
                .iter()
                .map(|(reason, count)| Behind {
                    what: reason.to_string(),
                    count: *count,
                })
                .collect(),
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
