//! `"kind": "bundle"`: where `trace --record` puts the packets of a finding.
use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::finding::BundleNotice;

/// A capture bundle `trace --record DIR` writes for the finding printed just before this line:
/// the same bundle `dnsloop capture` writes, in a new directory under DIR. It holds the packets
/// from `--record-before` before the finding to `--record-after` after it, and is written
/// then; a finding that comes while a bundle is still recording joins it. At most one bundle
/// is written per loop (per kind for other findings) per `--record-interval`: findings past
/// that get no `bundle` line, and are counted in the next one's `suppressed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleRecord {
    /// The kind of the finding: `loop`, `unexpected_source`, `timeout`, `drop` or `lookup`.
    pub finding: String,
    /// The loop's `loop_id`, for a loop; else `null`.
    pub loop_id: Option<String>,
    /// The finding's question name, with its trailing dot; `null` for a dropped message
    /// without a question.
    pub qname: Option<String>,
    /// The bundle's directory, where `capture.pcapng`, `report.json` and `report.md` appear
    /// once it is written.
    pub path: String,
    /// Whether this finding started the bundle; `false`: it joined one still recording.
    pub started: bool,
    /// The time of the bundle's first packets.
    pub from: Timestamp,
    /// The time of its last packets: it is written then (or when the trace ends, if sooner).
    pub until: Timestamp,
    /// Findings of the same loop (or kind) that got no bundle since the last one that did:
    /// `--record-interval` had not passed.
    pub suppressed: u64,
    /// The node this was seen on.
    pub node: String,
}

impl BundleRecord {
    /// `notice`, seen on `node`.
    pub fn new(notice: &BundleNotice, node: &str) -> Self {
        Self {
            finding: notice.finding.to_owned(),
            loop_id: notice.loop_id.map(|id| id.to_string()),
            qname: notice.qname.clone(),
            path: notice.path.display().to_string(),
            started: notice.started,
            from: notice.from.into(),
            until: notice.until.into(),
            suppressed: notice.suppressed,
            node: node.to_owned(),
        }
    }
}
