//! `"kind": "summary"`: what a run amounted to, written once at its end.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{Counts, Timestamp};
use crate::{analyzers, decode::ReassemblyCounts, present::mnemonic};

/// The end-of-run summary: the analyzers' numbers, then those of the source the packets came
/// from (the kernel's counters for `trace`, the file's for `analyze`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryRecord {
    /// When the run ended (for `analyze`, the capture's last packet or its end).
    pub ts: Timestamp,
    /// DNS messages the analyzers were given.
    pub observations: u64,
    /// Observations that arrived late, behind later ones, and were analysed out of order.
    pub late_observations: u64,
    /// Findings reported, by kind (a loop's or a timeout's every report counts).
    pub findings: FindingCounts,
    /// Every query that timed out, and how those not reported one by one were reported.
    pub timeouts: TimeoutCounts,
    /// Entries dropped from full tables, by table (`reorder`, `timeout`, ...): more than zero
    /// means some findings may have been missed.
    pub evictions: Counts,
    /// Queries still waiting for an answer when the run ended, not yet `--timeout` old.
    pub unanswered_at_end: u64,
    /// Every server that answered, in address order; for `trace`, every answer the kernel
    /// counted, streamed or not.
    pub servers: Vec<ServerAnswers>,
    /// The lookups followed (`--slow`); `null` when they were not.
    pub lookups: Option<LookupsSummary>,
    /// The source's own numbers: their fields follow here, in the same object.
    #[serde(flatten)]
    pub source: SummarySource,
    /// The node this was seen on.
    pub node: String,
}

/// How many findings of each kind were reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingCounts {
    /// `loop` records written.
    #[serde(rename = "loop")]
    pub loops: u64,
    /// `possible_loop` records written.
    pub possible_loop: u64,
    /// `unexpected_source` records written.
    pub unexpected_source: u64,
    /// `timeout` records written.
    pub timeout: u64,
    /// `drop` records written.
    pub drop: u64,
    /// `truncated_not_retried` records written.
    #[serde(default)]
    pub truncated_not_retried: u64,
    /// `search_list_waste` records written.
    #[serde(default)]
    pub search_list_waste: u64,
    /// `servfail_storm` records written.
    #[serde(default)]
    pub servfail_storm: u64,
    /// `fragmented_reply_lost` records written.
    #[serde(default)]
    pub fragmented_reply_lost: u64,
}

/// Every query that timed out (a client's retries of one query count once), and how many of
/// them were counted in other reports than a timeout of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutCounts {
    /// Queries with no answer after `--timeout`.
    pub queries: u64,
    /// Of those, the ones counted in a loop's `unanswered`.
    pub in_loops: u64,
    /// Of those, the ones counted in a repeated timeout's `count`.
    pub in_repeats: u64,
}

/// The answers one server sent, as its clients received them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerAnswers {
    /// The server as its clients addressed it, before any DNAT.
    pub server: SocketAddr,
    /// Answers that reached their client.
    #[serde(rename = "count")]
    pub answered: u64,
    /// Median answer latency, in milliseconds.
    pub p50_ms: f64,
    /// 90th percentile answer latency, in milliseconds.
    pub p90_ms: f64,
    /// 99th percentile answer latency, in milliseconds.
    pub p99_ms: f64,
    /// The slowest answer, in milliseconds.
    pub max_ms: f64,
    /// Answers by response code (`NOERROR`, `NXDOMAIN`, ...), in code order.
    pub rcodes: Counts,
    /// Of the answers, those with TC set: cut to fit, for the client to ask again over TCP.
    #[serde(default)]
    pub truncated: u64,
}

/// The lookups followed through their forwards (`--slow`), and the time spent at each server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LookupsSummary {
    /// `--slow`, in milliseconds.
    pub slow_ms: f64,
    /// Client queries answered and followed through the forwards they caused.
    pub followed: u64,
    /// Of those, the ones answered `--slow` or later.
    pub slow: u64,
    /// Slow lookups written as `lookup` records.
    pub reported: u64,
    /// Slow lookups not written: past the 10 a second written.
    pub suppressed: u64,
    /// Answered queries that could not be placed in a lookup: forgotten before their answer,
    /// or in a chain of more than 16 forwards (a loop).
    pub unlinked: u64,
    /// The time spent at the hops to each server, in address order.
    pub hops: Vec<HopTimes>,
}

/// The time spent at the hops to one server: each hop's latency less the time its own
/// forwards were awaited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HopTimes {
    /// The server as its senders addressed it.
    pub server: SocketAddr,
    /// Hops to it in lookups followed.
    pub count: u64,
    /// Median time spent at it, in milliseconds.
    pub p50_ms: f64,
    /// 90th percentile, in milliseconds.
    pub p90_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// The longest, in milliseconds.
    pub max_ms: f64,
}

/// Where the packets came from, and what it counted: a summary carries the fields of one of
/// these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SummarySource {
    /// `trace`, `capture` and `probe`: the kernel programs.
    Kernel(KernelSummary),
    /// `analyze`: a capture file.
    CaptureFile(CaptureFileSummary),
}

/// What the kernel programs counted, and what was lost on the way. Loss is always reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSummary {
    /// Packets per watched interface and direction.
    pub interfaces: Vec<InterfaceCount>,
    /// The kernel programs' counters, in their order: `packets`, `dns_packets`,
    /// `dns_messages`, `non_first_fragments`, `tcp_splits`, `tcp_messages_beyond_limit`,
    /// `lost_records`, `streamed_records`, `dns_port_unreachable` (ICMP refusals of a DNS
    /// reply), `unplaced_packets`, `dns_drops` (DNS packets the kernel dropped),
    /// `queries_not_tracked` (new queries the full query table had no room for: no timeout of
    /// theirs is reported).
    pub kernel: Counts,
    /// DNS-port packets that could not be parsed, by reason; only reasons that occurred.
    pub malformed: Counts,
    /// DNS packets the kernel dropped, by the kernel's drop reason (`NETFILTER_DROP`, ...);
    /// only reasons that occurred. `null` when this kernel's drops are not watched.
    pub drops: Option<Counts>,
    /// Records the ring buffer had no room for: each may hide a finding.
    pub lost_events: u64,
    /// Records from the kernel that could not be decoded.
    pub undecodable_records: u64,
    /// Records seen on an interface that had just gone away, so not placed.
    pub unplaced_records: u64,
    /// Kernel features dnsloop did without on this node, each costing a function (`tcx`,
    /// `tc_netns_cookie`, `drop_reasons`, `netns_cookie`; see the README's kernel table);
    /// empty on a kernel that has them all, or in a record of a dnsloop that did not say.
    #[serde(default)]
    pub kernel_lacks: Vec<String>,
    /// What userspace put together from the TCP segments and IP fragments streamed to it, when
    /// every DNS packet was (`--packets`, `--slow`; `--record`, whose TCP segments streamed for
    /// the recorder complete the analysis's messages); `null` otherwise, when a stream's other
    /// segments are missing by design and only those that start with a message are read.
    #[serde(default)]
    pub reassembly: Option<Box<ReassemblySummary>>,
    /// What the node's conntrack counters rose by during the run; `null` where conntrack's
    /// statistics could not be read (conntrack not loaded).
    #[serde(default)]
    pub conntrack: Option<ConntrackCounts>,
}

/// The node's conntrack counters over a run (`/proc/net/stat/nf_conntrack`, every flow's):
/// races between two packets of one new flow on two CPUs, as a resolver's parallel A and AAAA
/// queries from one socket make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackCounts {
    /// Races the kernel resolved without dropping a packet: the same race, survived; `null`
    /// on a kernel that does not count them (before Linux 5.6).
    pub clashes_resolved: Option<u64>,
    /// Entries that lost the race to be inserted.
    pub insert_failed: u64,
    /// Packets dropped because their entry could not be made (a lost race, a full table): for
    /// DNS over UDP, each a 5-second timeout.
    pub drop: u64,
}

/// What a capture file held and how its packets were placed, in place of the kernel's
/// counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureFileSummary {
    /// The file read.
    pub capture: CaptureFileInfo,
    /// Packets per interface and direction, as placed.
    pub interfaces: Vec<InterfaceCount>,
    /// Each interface the file lists, and how its role was learnt.
    pub capture_interfaces: Vec<PlacedInterface>,
    /// What became of the file's packets.
    pub packets: CapturePackets,
    /// DNS-port packets that could not be parsed, by reason.
    pub malformed: Counts,
    /// What was put together from more than one packet, or found inside a tunnel.
    #[serde(default)]
    pub reassembly: Box<ReassemblySummary>,
}

/// DNS that spans packets: TCP streams cut into messages, fragmented datagrams put back
/// together, and frames carried in VXLAN or Geneve.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassemblySummary {
    /// DNS messages put together from more than one TCP segment.
    pub tcp_messages_across_segments: u64,
    /// TCP segments that came before one they follow, and waited for it.
    pub tcp_out_of_order: u64,
    /// TCP segments whose every byte had come before.
    pub tcp_retransmissions: u64,
    /// Places where a TCP stream's bytes were never captured.
    pub tcp_gaps: u64,
    /// The bytes those places held.
    pub tcp_bytes_lost: u64,
    /// DNS messages a gap cut, analysed as far as they were held.
    pub tcp_messages_cut: u64,
    /// Bytes passed over after a gap, up to a segment that starts with a whole message: a
    /// message's middle is never read as a message.
    pub tcp_bytes_skipped: u64,
    /// DNS messages begun and never finished when their stream ended or the capture did.
    pub tcp_messages_unfinished: u64,
    /// IP fragments read.
    pub ip_fragments: u64,
    /// Datagrams put back together from them.
    pub ip_datagrams_reassembled: u64,
    /// DNS datagrams some fragment of which was never captured; their first fragment was
    /// analysed alone.
    pub ip_datagrams_incomplete: u64,
    /// The first of those, `source > destination id: bytes held of length`.
    pub incomplete_datagrams: Vec<String>,
    /// Packets whose DNS was found inside VXLAN or Geneve.
    pub encapsulated: u64,
}

/// Packets counted at one interface in one direction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceCount {
    /// The interface.
    pub ifname: String,
    /// `ingress` or `egress`.
    pub dir: String,
    /// Packets on a DNS port that held at least one DNS message.
    pub dns_packets: u64,
    /// Every packet.
    pub packets: u64,
}

/// The capture file `analyze` read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureFileInfo {
    /// Its path, as given.
    pub file: String,
    /// `pcap` or `pcapng`.
    pub format: String,
    /// Whether it was read to its end.
    pub complete: bool,
    /// Why reading stopped early (a truncated or corrupt file); `null` when complete.
    pub note: Option<String>,
}

/// An interface of a capture file, placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedInterface {
    /// Its name, or how findings name it (`ifindex 4`, `any`, `interface 2`).
    pub ifname: String,
    /// The pcap link type (`LINKTYPE_*`) of its packets.
    pub linktype: u32,
    /// How its role was learnt: `description`, `name` or `addresses`.
    pub placed_by: String,
    /// The node side's MAC, when MAC addresses told directions; else `null`.
    pub node_mac: Option<String>,
}

/// What became of a capture file's packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturePackets {
    /// Packets read.
    pub read: u64,
    /// Of those, DNS messages analysed.
    pub dns: u64,
    /// Not DNS (not on a DNS port).
    pub not_dns: u64,
    /// On a DNS port, but could not be parsed.
    pub malformed: u64,
    /// TCP segments and IP fragments of DNS traffic that completed no message themselves:
    /// handshakes, acknowledgements, parts of messages or datagrams.
    #[serde(default)]
    pub in_reassembly: u64,
    /// On an interface whose link type dnsloop does not read.
    pub unsupported_link: u64,
    /// Not placed on an interface and direction.
    pub unplaced: u64,
}

impl From<&ReassemblyCounts> for ReassemblySummary {
    fn from(counts: &ReassemblyCounts) -> Self {
        let (tcp, ip) = (&counts.tcp, &counts.ip);
        Self {
            tcp_messages_across_segments: tcp.messages_across_segments,
            tcp_out_of_order: tcp.out_of_order,
            tcp_retransmissions: tcp.retransmissions,
            tcp_gaps: tcp.gaps,
            tcp_bytes_lost: tcp.bytes_lost,
            tcp_messages_cut: tcp.messages_cut,
            tcp_bytes_skipped: tcp.bytes_skipped,
            tcp_messages_unfinished: tcp.messages_unfinished,
            ip_fragments: ip.fragments,
            ip_datagrams_reassembled: ip.reassembled,
            ip_datagrams_incomplete: ip.incomplete,
            incomplete_datagrams: ip
                .incomplete_named
                .iter()
                .map(ToString::to_string)
                .collect(),
            encapsulated: counts.encapsulated,
        }
    }
}

impl SummaryRecord {
    /// The analyzers' `summary` with the `source`'s numbers, on `node`.
    pub fn new(summary: &analyzers::Summary, source: SummarySource, node: &str) -> Self {
        Self {
            ts: summary.at.into(),
            observations: summary.observations,
            late_observations: summary.late_observations,
            findings: FindingCounts {
                loops: summary.findings.loops,
                possible_loop: summary.findings.possible_loops,
                unexpected_source: summary.findings.unexpected_sources,
                timeout: summary.findings.timeouts,
                drop: summary.findings.drops,
                truncated_not_retried: summary.findings.truncated_not_retried,
                search_list_waste: summary.findings.search_list_waste,
                servfail_storm: summary.findings.servfail_storms,
                fragmented_reply_lost: summary.findings.fragmented_replies_lost,
            },
            timeouts: TimeoutCounts {
                queries: summary.timeouts.queries,
                in_loops: summary.timeouts.in_loops,
                in_repeats: summary.timeouts.in_repeats,
            },
            evictions: summary
                .evictions
                .iter()
                .map(|(&table, &count)| (table, count))
                .collect(),
            unanswered_at_end: summary.unanswered_at_end,
            servers: summary.servers.iter().map(ServerAnswers::new).collect(),
            lookups: summary.lookups.as_ref().map(LookupsSummary::new),
            source,
            node: node.to_owned(),
        }
    }

    /// Packets per interface and direction, as the kernel or the capture file counted them.
    pub fn interfaces(&self) -> &[InterfaceCount] {
        match &self.source {
            SummarySource::Kernel(kernel) => &kernel.interfaces,
            SummarySource::CaptureFile(file) => &file.interfaces,
        }
    }

    /// The kernel's numbers; `None` for a capture file's summary.
    pub fn kernel(&self) -> Option<&KernelSummary> {
        match &self.source {
            SummarySource::Kernel(kernel) => Some(kernel),
            SummarySource::CaptureFile(_) => None,
        }
    }
}

impl ServerAnswers {
    pub fn new(server: &analyzers::ServerSummary) -> Self {
        Self {
            server: server.server,
            answered: server.answered,
            p50_ms: millis(server.p50),
            p90_ms: millis(server.p90),
            p99_ms: millis(server.p99),
            max_ms: millis(server.max),
            rcodes: server
                .rcodes
                .iter()
                .map(|(&rcode, &count)| (mnemonic::rcode(rcode), count))
                .collect(),
            truncated: server.truncated,
        }
    }
}

impl LookupsSummary {
    pub fn new(lookups: &analyzers::LookupSummary) -> Self {
        let counts = lookups.counts;
        Self {
            slow_ms: millis(lookups.slow),
            followed: counts.followed,
            slow: counts.slow,
            reported: counts.reported,
            suppressed: counts.suppressed,
            unlinked: counts.unlinked,
            hops: lookups
                .servers
                .iter()
                .map(|times| HopTimes {
                    server: times.server,
                    count: times.hops,
                    p50_ms: millis(times.p50),
                    p90_ms: millis(times.p90),
                    p99_ms: millis(times.p99),
                    max_ms: millis(times.max),
                })
                .collect(),
        }
    }
}

/// A duration in milliseconds, as the schema writes durations.
pub(super) fn millis(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
