//! `report.json`, the record `dnsloop capture` (and `trace --record`) leaves in its bundle
//! beside `capture.pcapng`.
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ByName, DoctorRecord, Record, SummaryRecord, Timestamp};

/// `report.json` of a `dnsloop capture` bundle (one pretty-printed object, `"kind":
/// "capture"`): the findings and summary as `trace --output json` prints them, what the
/// packet file holds, and the node's DNS configuration at capture time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "capture")]
pub struct CaptureReport {
    /// The version of dnsloop that captured.
    pub dnsloop: String,
    /// The node's kernel release; `null` if unreadable.
    pub kernel: Option<String>,
    /// The node's host name; `null` if unreadable.
    pub hostname: Option<String>,
    /// When the capture started.
    pub started: Timestamp,
    /// When the bundle was written.
    pub ended: Timestamp,
    /// `--duration`, in seconds: the capture ends then, or sooner on SIGINT or SIGTERM. For a
    /// bundle `trace --record` wrote, the seconds from its `from` to its `until`.
    pub duration_limit_s: f64,
    /// The packet file; `null` when names are redacted: its packets carry every name, so it
    /// is left out.
    pub pcapng: Option<PcapngFile>,
    /// Whether names are redacted (`--redact-names`): each a keyed hash of its labels, the
    /// cluster's structure (`<namespace>.svc.<cluster domain>`) and a name's top-level domain
    /// left readable, as in `h:3f9a1c0d52e8.default.svc.cluster.local.`.
    pub names_redacted: bool,
    /// The interfaces packets were seen on, as the packet file records them.
    pub interfaces: Vec<CapturedInterface>,
    /// The `loop`, `unexpected_source` and `timeout` records of the capture, in order.
    pub findings: Vec<Record>,
    /// The capture's `summary` record (with its `kind`); `null` if it ended before one, and
    /// for a bundle `trace --record` wrote while the trace went on.
    #[serde(with = "summary_record")]
    pub summary: Option<SummaryRecord>,
    /// The node's DNS configuration at capture time.
    pub node: NodeDnsConfig,
    /// For a bundle `trace --record` wrote: the finding that started it and the time it
    /// spans; `null` for one `capture` wrote.
    pub recorded: Option<RecordedBundle>,
}

/// What made `trace --record` write a bundle, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedBundle {
    /// The kind of the finding that started it: `loop`, `unexpected_source`, `timeout`,
    /// `drop` or `lookup`.
    pub finding: String,
    /// The loop's `loop_id`, for a loop; else `null`.
    pub loop_id: Option<String>,
    /// The finding's question name, with its trailing dot; `null` for a dropped message
    /// without a question.
    pub qname: Option<String>,
    /// The time of the bundle's first packets: `--record-before` before the finding's first.
    pub from: Timestamp,
    /// The time of its last packets: `--record-after` after the finding (or the end of the
    /// trace, if sooner).
    pub until: Timestamp,
    /// Whether the memory held every packet since `from`; `false`: the oldest had been
    /// dropped to stay within `--record-bytes`.
    pub complete: bool,
}

/// `capture.pcapng`, the bundle's packet file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcapngFile {
    /// Its name in the bundle.
    pub file: String,
    /// Packets written.
    pub packets: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Packets written with a finding's comment.
    pub commented: u64,
    /// Packets left out once the file reached `--max-bytes`.
    pub left_out: u64,
    /// Packets of an interface that had gone away, so not written.
    pub unplaced: u64,
    /// A sentence saying when the size limit left packets out; `null` if none was.
    pub note: Option<String>,
}

/// An interface packets were seen on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedInterface {
    /// Its name.
    pub ifname: String,
    /// Its pcapng `if_description`: its role, for `dnsloop analyze` to place it.
    pub description: String,
}

/// The node's DNS configuration at capture time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDnsConfig {
    /// The node's `/etc/resolv.conf`.
    pub resolv_conf: ResolvConf,
    /// The sysctls that decide how DNS crosses the node (`net.bridge.bridge-nf-call-iptables`,
    /// conntrack's, `net.ipv4.ip_forward`), by name, as read; `null` where absent.
    pub sysctls: ByName<Option<String>>,
    /// `dnsloop doctor`'s records for the node, as `doctor --output json` prints them.
    pub checks: Vec<DoctorRecord>,
}

/// A copy of the node's `/etc/resolv.conf`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvConf {
    /// Always `/etc/resolv.conf`, below `--root`.
    pub path: String,
    /// Where it links to, when it is a symlink; else `null`.
    pub symlink_to: Option<String>,
    /// Its content; `null` if unreadable.
    pub content: Option<String>,
}

/// A summary written as the `summary` record it is, `kind` included.
mod summary_record {
    use super::*;

    pub fn serialize<S: Serializer>(
        summary: &Option<SummaryRecord>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        summary.clone().map(Record::Summary).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SummaryRecord>, D::Error> {
        match Option::<Record>::deserialize(deserializer)? {
            None => Ok(None),
            Some(Record::Summary(summary)) => Ok(Some(summary)),
            Some(_) => Err(serde::de::Error::custom("not a summary record")),
        }
    }
}
