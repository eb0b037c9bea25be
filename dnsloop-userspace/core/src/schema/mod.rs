//! What dnsloop prints as JSON, declared once: a `Serialize + Deserialize` record for every
//! kind of line and file it writes. The JSON sink writes these, `capture` and `probe` print
//! them, the end-to-end tests read them back, and the JSON output reference, docs/output.md,
//! is generated from this module's doc comments (`cargo test -p dnsloop-core output_doc`
//! checks it).
//!
//! One object per line: its `kind` first (the [`Record`] variant), then its fields in the
//! order declared here, and last, for everything `trace` and `analyze` print, the `node` it
//! was seen on. Times are [`Timestamp`]s (`2025-01-01T12:00:01.123Z`), addresses `ip:port`
//! (`[v6]:port`), DNS codes their names (`A`, `NXDOMAIN`), durations milliseconds. Names
//! (`qname`) are in presentation format with a trailing dot, as sent; with `--redact-names`,
//! each label a keyed hash but the cluster's structure and the top-level domain
//! (`h:3f9a1c0d52e8.default.svc.cluster.local.`, `h:5c0e7f19aa30.h:9d11aa6e03f4.com.`). Fields
//! are never left out: one without a value is `null`.
mod bundle;
mod by_name;
mod capture;
mod doctor;
mod drop;
mod fragmentation;
mod lookup;
mod loop_record;
mod malformed;
mod packet;
mod probe;
mod search_list;
mod servfail;
mod summary;
mod timeout;
mod timestamp;
mod truncation;
mod unexpected_source;

#[cfg(test)]
mod output_doc;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use bundle::BundleRecord;
pub use by_name::{ByName, Counts};
pub use capture::{
    CaptureReport, CapturedInterface, NodeDnsConfig, PcapngFile, RecordedBundle, ResolvConf,
};
pub use doctor::{CheckRecord, DoctorRecord, DoctorSummaryRecord};
pub use drop::{DropCause, DropRecord};
pub use fragmentation::FragmentationRecord;
pub use lookup::{LookupHop, LookupRecord};
pub use loop_record::{Dnat, Hop, LoopRecord, OffNode, Unconfirmed};
pub use malformed::MalformedRecord;
pub use packet::PacketRecord;
pub use probe::{ProbeRecord, ProbeResult};
pub use search_list::{SearchListRecord, SlowestSearch};
pub use servfail::{Behind, ServfailRecord};
pub use summary::{
    CaptureFileInfo, CaptureFileSummary, CapturePackets, ConntrackCounts, FindingCounts, HopTimes,
    InterfaceCount, KernelSummary, LookupsSummary, PlacedInterface, ReassemblySummary,
    ServerAnswers, SummaryRecord, SummarySource, TimeoutCounts,
};
pub use timeout::TimeoutRecord;
pub use timestamp::Timestamp;
pub use truncation::TruncationRecord;
pub use unexpected_source::{Conntrack, UnexpectedSourceRecord};

use crate::finding::Finding;

/// One line of `dnsloop trace --output json`, and of `analyze`, `capture` and `probe`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A forwarding loop: when found, then at most once per `--report-interval`.
    Loop(LoopRecord),
    /// A cycle of forwards that may be a loop, where part of the evidence is missing (see
    /// `unconfirmed`): counted apart, and raises no loop alert.
    PossibleLoop(LoopRecord),
    /// A reply from another address than its query went to.
    UnexpectedSource(UnexpectedSourceRecord),
    /// A server left queries unanswered.
    Timeout(TimeoutRecord),
    /// The kernel dropped DNS messages.
    Drop(DropRecord),
    /// A client took truncated answers without asking again over TCP.
    TruncatedNotRetried(TruncationRecord),
    /// A client's lookups went through its search list first, wasting queries.
    SearchListWaste(SearchListRecord),
    /// A server answers SERVFAIL at a high rate.
    ServfailStorm(ServfailRecord),
    /// DNS replies lost to fragmentation: a host gave up reassembling them.
    FragmentedReplyLost(FragmentationRecord),
    /// Where `trace --record` puts the packets of the finding just before it.
    Bundle(BundleRecord),
    /// A sample of the packets on DNS ports that could not be parsed.
    Malformed(MalformedRecord),
    /// A client's query answered `--slow` or later, hop by hop.
    Lookup(LookupRecord),
    /// A DNS message seen (`--packets`).
    Packet(PacketRecord),
    /// What the run amounted to, once at its end.
    Summary(SummaryRecord),
    /// What `dnsloop probe` found, last.
    Probe(ProbeRecord),
}

impl Record {
    /// The record of `finding`, seen on `node`.
    pub fn finding(finding: &Finding, node: &str) -> Self {
        match finding {
            Finding::Loop(found) if found.is_possible() => {
                Self::PossibleLoop(LoopRecord::new(found, node))
            }
            Finding::Loop(found) => Self::Loop(LoopRecord::new(found, node)),
            Finding::UnexpectedSource(found) => {
                Self::UnexpectedSource(UnexpectedSourceRecord::new(found, node))
            }
            Finding::Timeout(found) => Self::Timeout(TimeoutRecord::new(found, node)),
            Finding::Drop(found) => Self::Drop(DropRecord::new(found, node)),
            Finding::Lookup(found) => Self::Lookup(LookupRecord::new(found, node)),
            Finding::TruncatedNotRetried(found) => {
                Self::TruncatedNotRetried(TruncationRecord::new(found, node))
            }
            Finding::SearchListWaste(found) => {
                Self::SearchListWaste(SearchListRecord::new(found, node))
            }
            Finding::ServfailStorm(found) => Self::ServfailStorm(ServfailRecord::new(found, node)),
            Finding::FragmentedReplyLost(found) => {
                Self::FragmentedReplyLost(FragmentationRecord::new(found, node))
            }
        }
    }
}
