//! Lines for a person at a terminal: one per finding (a loop's path indented below it), one per
//! packet, and a small table at the end. Times are UTC time of day.
//!
//! Names, interface names and namespaces come from the network; every line goes through
//! [`printable`] so that no control byte (an escape sequence, a newline) reaches the terminal.
use std::{
    borrow::Cow,
    fmt::Write as _,
    io::{self, Write},
    net::SocketAddr,
    time::Duration,
};

use super::{ipv4_pieces, Sink};
use crate::{
    analyzers::{destination, LookupSummary, Summary},
    decode::MalformedSample,
    finding::{BundleNotice, Finding, Hop, LookupFinding, LoopFinding, UnexpectedSourceFinding},
    observation::{Namespace, Observation},
    present::{
        hex, mnemonic,
        names::Names,
        probe_name,
        time::{time_of_day, write_time_of_day},
    },
    schema::{
        CaptureFileSummary, Counts, InterfaceCount, KernelSummary, ReassemblySummary, SummarySource,
    },
};

pub struct TextSink<W> {
    out: W,
    /// The `--packets` line being written, its buffer kept from one packet to the next.
    packet_line: String,
    /// How packet lines write names (findings come with theirs written), and whether bundles
    /// hold packets.
    names: Names,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W, names: &Names) -> Self {
        Self {
            out,
            packet_line: String::new(),
            names: names.clone(),
        }
    }

    fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{}", printable(text))
    }

    fn loop_found(&mut self, found: &LoopFinding) -> io::Result<()> {
        // The summary's own label repeats what the tag already says.
        let (tag, label) = if found.is_possible() {
            ("POSSIBLE LOOP", "possible loop: ")
        } else {
            ("LOOP", "loop: ")
        };
        let summary = found.summary.strip_prefix(label).unwrap_or(&found.summary);
        let probe =
            probe_name(found.probe).map_or(String::new(), |probe| format!(" [{probe} probe]"));
        let rate = found
            .rounds_per_second()
            .map_or(String::new(), |rate| format!(" ({rate:.0}/s)"));
        let unanswered = match found.unanswered {
            0 => String::new(),
            unanswered => format!(", {unanswered} unanswered"),
        };
        self.line(&format!(
            "{}  {tag}  x{}{rate}{unanswered}{probe}  {summary}  [loop_id {}]",
            time_of_day(found.ts),
            found.count,
            found.loop_id,
        ))?;
        // A repeat only updates the count: the path was drawn with the first report.
        if found.ts == found.since {
            for hop in &found.path {
                self.line(&hop_line(hop, dnat_service(found, hop)))?;
            }
        }
        Ok(())
    }

    fn unexpected_source(&mut self, found: &UnexpectedSourceFinding) -> io::Result<()> {
        self.line(&format!(
            "{}  UNEXPECTED SOURCE  {} {}  {}",
            time_of_day(found.ts),
            found.qname,
            mnemonic::qtype(found.qtype),
            found.summary
        ))?;
        if let Some(cause) = &found.cause {
            self.line(&format!("  cause: {cause}"))?;
        }
        if let Some(conntrack) = &found.conntrack {
            self.line(&format!(
                "  conntrack: sent to {}, reply expected from {}{}",
                conntrack.original_dst,
                conntrack.reply_src,
                if conntrack.unreplied {
                    ", never replied"
                } else {
                    ""
                }
            ))?;
        }
        Ok(())
    }

    /// A slow lookup: one line, then a line per hop, indented by how deep it forwards.
    fn lookup(&mut self, found: &LookupFinding) -> io::Result<()> {
        let client = found.client_query();
        self.line(&format!(
            "{}  SLOW  {}  {}",
            time_of_day(found.ts),
            latency(client.latency()),
            found.summary
        ))?;
        for (index, hop) in found.hops.iter().enumerate() {
            let depth = std::iter::successors(hop.forwards, |&parent| found.hops[parent].forwards)
                .take(found.hops.len())
                .count();
            let from = hop
                .from
                .as_ref()
                .map_or_else(|| hop.src.to_string(), ToString::to_string);
            let slowest = if index == found.slowest {
                "  <- slowest"
            } else {
                ""
            };
            self.line(&format!(
                "  {:indent$}+{:<9} {from} -> {}  id {}  {} {}, own {}{slowest}",
                "",
                latency(hop.sent.duration_since(client.sent).unwrap_or_default()),
                destination(hop),
                hop.id,
                mnemonic::rcode(hop.rcode),
                latency(hop.latency()),
                latency(hop.own),
                indent = 2 * depth,
            ))?;
        }
        if found.hops_left_out > 0 {
            self.line(&format!(
                "  ... {} more forwards answered, not shown",
                found.hops_left_out
            ))?;
        }
        Ok(())
    }

    /// The lookups' numbers, and the time spent at each server's hops.
    fn lookups_summary(&mut self, lookups: &LookupSummary) -> io::Result<()> {
        let counts = lookups.counts;
        let unlinked = match counts.unlinked {
            0 => String::new(),
            unlinked => format!(", {unlinked} answers not placed in a lookup"),
        };
        self.line(&format!(
            "lookups: {} followed, {} slower than {} ({} reported, {} suppressed){unlinked}",
            counts.followed,
            counts.slow,
            latency(lookups.slow),
            counts.reported,
            counts.suppressed
        ))?;
        if lookups.servers.is_empty() {
            return Ok(());
        }
        self.line(&format!(
            "  {:<40} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "time spent at", "hops", "p50", "p90", "p99", "max"
        ))?;
        for times in &lookups.servers {
            self.line(&format!(
                "  {:<40} {:>8} {:>9} {:>9} {:>9} {:>9}",
                times.server.to_string(),
                times.hops,
                latency(times.p50),
                latency(times.p90),
                latency(times.p99),
                latency(times.max),
            ))?;
        }
        Ok(())
    }

    /// A finding that says how many times it happened: `12:00:03.000  TIMEOUT x37  ...`, the
    /// count left out when it is one.
    fn counted(
        &mut self,
        kind: &str,
        ts: std::time::SystemTime,
        count: u64,
        summary: &str,
    ) -> io::Result<()> {
        let count = match count {
            1 => String::new(),
            count => format!(" x{count}"),
        };
        self.line(&format!("{}  {kind}{count}  {summary}", time_of_day(ts)))
    }

    /// The kernel's numbers below the summary.
    fn kernel_summary(&mut self, kernel: &KernelSummary) -> io::Result<()> {
        self.interfaces(&kernel.interfaces)?;
        self.line(&format!("kernel: {}", counts(&kernel.kernel)))?;
        self.line(&format!("malformed: {}", counts(&kernel.malformed)))?;
        match &kernel.drops {
            Some(drops) => self.line(&format!("kernel drops of DNS packets: {}", counts(drops)))?,
            None => self.line("kernel drops of DNS packets: not watched")?,
        }
        self.line(&format!("lost_events: {}", kernel.lost_events))?;
        self.line(&format!(
            "undecodable_records: {}",
            kernel.undecodable_records
        ))?;
        self.line(&format!("unplaced_records: {}", kernel.unplaced_records))?;
        if !kernel.kernel_lacks.is_empty() {
            self.line(&format!("kernel lacks: {}", kernel.kernel_lacks.join(", ")))?;
        }
        if let Some(conntrack) = &kernel.conntrack {
            let resolved = match conntrack.clashes_resolved {
                Some(resolved) => format!("{resolved} clashes resolved, "),
                None => String::new(),
            };
            self.line(&format!(
                "conntrack during the run (every flow's): {resolved}{} insert_failed, {} dropped",
                conntrack.insert_failed, conntrack.drop
            ))?;
        }
        match &kernel.reassembly {
            Some(reassembly) => self.reassembly(reassembly),
            None => Ok(()),
        }
    }

    /// The capture file's numbers below the summary.
    fn capture_file_summary(&mut self, file: &CaptureFileSummary) -> io::Result<()> {
        let capture = &file.capture;
        self.line(&format!(
            "capture: file {}, format {}, complete {}, note {}",
            capture.file,
            capture.format,
            capture.complete,
            capture.note.as_deref().unwrap_or("null")
        ))?;
        self.interfaces(&file.interfaces)?;
        let placed = file.capture_interfaces.iter().map(|interface| {
            vec![
                interface.ifname.clone(),
                interface.linktype.to_string(),
                interface.placed_by.clone(),
                interface
                    .node_mac
                    .clone()
                    .unwrap_or_else(|| "null".to_owned()),
            ]
        });
        self.table(
            "capture_interfaces",
            &["ifname", "linktype", "placed_by", "node_mac"],
            placed.collect(),
        )?;
        let packets = &file.packets;
        self.line(&format!(
            "packets: read {}, dns {}, not_dns {}, malformed {}, in_reassembly {}, \
             unsupported_link {}, unplaced {}",
            packets.read,
            packets.dns,
            packets.not_dns,
            packets.malformed,
            packets.in_reassembly,
            packets.unsupported_link,
            packets.unplaced
        ))?;
        self.line(&format!("malformed: {}", counts(&file.malformed)))?;
        self.reassembly(&file.reassembly)
    }

    /// What spanned packets: one line for TCP, one for IP fragments and tunnels, and each
    /// datagram never completed.
    fn reassembly(&mut self, reassembly: &ReassemblySummary) -> io::Result<()> {
        self.line(&format!(
            "tcp: messages_across_segments {}, out_of_order {}, retransmissions {}, gaps {}, \
             bytes_lost {}, messages_cut {}, bytes_skipped {}, messages_unfinished {}",
            reassembly.tcp_messages_across_segments,
            reassembly.tcp_out_of_order,
            reassembly.tcp_retransmissions,
            reassembly.tcp_gaps,
            reassembly.tcp_bytes_lost,
            reassembly.tcp_messages_cut,
            reassembly.tcp_bytes_skipped,
            reassembly.tcp_messages_unfinished
        ))?;
        self.line(&format!(
            "ip: fragments {}, datagrams_reassembled {}, datagrams_incomplete {}, encapsulated {}",
            reassembly.ip_fragments,
            reassembly.ip_datagrams_reassembled,
            reassembly.ip_datagrams_incomplete,
            reassembly.encapsulated
        ))?;
        for datagram in &reassembly.incomplete_datagrams {
            self.line(&format!("  incomplete: {datagram}"))?;
        }
        Ok(())
    }

    fn interfaces(&mut self, interfaces: &[InterfaceCount]) -> io::Result<()> {
        let rows = interfaces.iter().map(|count| {
            vec![
                count.ifname.clone(),
                count.dir.clone(),
                count.dns_packets.to_string(),
                count.packets.to_string(),
            ]
        });
        self.table(
            "interfaces",
            &["ifname", "dir", "dns_packets", "packets"],
            rows.collect(),
        )
    }

    /// `name:`, then a row of column names and one row per record, in columns 16 wide. With no
    /// records there are no columns either: the header row is empty.
    fn table(&mut self, name: &str, columns: &[&str], rows: Vec<Vec<String>>) -> io::Result<()> {
        self.line(&format!("{name}:"))?;
        let row = |cells: &[String]| {
            let padded: String = cells.iter().map(|cell| format!("{cell:<16}")).collect();
            format!("  {}", padded.trim_end())
        };
        let header: Vec<String> = if rows.is_empty() {
            Vec::new()
        } else {
            columns.iter().map(|column| column.to_string()).collect()
        };
        self.line(&row(&header))?;
        for cells in &rows {
            self.line(&row(cells))?;
        }
        Ok(())
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        match finding {
            Finding::Loop(found) => self.loop_found(found)?,
            Finding::UnexpectedSource(found) => self.unexpected_source(found)?,
            Finding::Timeout(found) => {
                self.counted("TIMEOUT", found.ts, found.count, &found.summary)?
            }
            Finding::Drop(found) => self.counted("DROP", found.ts, found.count, &found.summary)?,
            Finding::Lookup(found) => self.lookup(found)?,
            Finding::TruncatedNotRetried(found) => {
                self.counted("TRUNCATED", found.ts, found.count, &found.summary)?
            }
            Finding::SearchListWaste(found) => {
                self.counted("SEARCH", found.ts, 1, &found.summary)?
            }
            Finding::ServfailStorm(found) => {
                self.counted("SERVFAIL", found.ts, 1, &found.summary)?
            }
            Finding::FragmentedReplyLost(found) => {
                self.counted("FRAGMENTED", found.ts, found.count, &found.summary)?
            }
        }
        self.out.flush()
    }

    fn packet(&mut self, obs: &Observation) -> io::Result<()> {
        let text = &mut self.packet_line;
        packet_line(obs, &self.names, text);
        let escaped = match printable(text) {
            Cow::Owned(escaped) => Some(escaped),
            Cow::Borrowed(_) => None,
        };
        if let Some(escaped) = escaped {
            *text = escaped;
        }
        text.push('\n');
        self.out.write_all(text.as_bytes())
    }

    fn bundle(&mut self, notice: &BundleNotice) -> io::Result<()> {
        let joined = if notice.started {
            ""
        } else {
            "joins the bundle recording; "
        };
        let suppressed = match notice.suppressed {
            0 => String::new(),
            count => format!("; {count} earlier finding(s) of it got none (--record-interval)"),
        };
        // Redacted, a bundle holds no packets (see `crate::bundle`).
        let what = if self.names.is_redacted() {
            "findings"
        } else {
            "packets"
        };
        self.line(&format!(
            "  bundle: {} ({joined}{what} from {} to {}, written then{suppressed})",
            notice.path.display(),
            time_of_day(notice.from),
            time_of_day(notice.until),
        ))?;
        self.out.flush()
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        let mut text = format!(
            "{}  MALFORMED  {} on {} {}",
            time_of_day(sample.ts),
            sample.reason.as_str(),
            sample.ifname,
            sample.direction.as_str()
        );
        if let Some((src, dst)) = sample.addresses {
            let _ = write!(text, ", {src} -> {dst}");
        }
        if self.names.is_redacted() {
            text.push_str(" (a sample; all are counted; its bytes left out: they may hold a name)");
        } else {
            let _ = write!(text, " (a sample; all are counted): {}", hex(&sample.head));
        }
        self.line(&text)
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()> {
        let findings = summary.findings;
        self.line(&format!(
            "summary: {} observations ({} out of order), {} queries unanswered at the end",
            summary.observations, summary.late_observations, summary.unanswered_at_end
        ))?;
        let timeouts = summary.timeouts;
        // Said only when a storm was folded: otherwise every timeout is a line of its own.
        let folded = if timeouts.in_loops + timeouts.in_repeats == 0 {
            String::new()
        } else {
            format!(
                " ({} queries timed out: {} counted in loops' reports, {} in repeated timeouts)",
                timeouts.queries, timeouts.in_loops, timeouts.in_repeats
            )
        };
        let possible = match findings.possible_loops {
            0 => String::new(),
            count => format!(" ({count} possible loop)"),
        };
        // Said only when there were any, as the fewest readers meet them.
        let truncated = match findings.truncated_not_retried {
            0 => String::new(),
            count => format!(", {count} truncated not retried"),
        };
        let search = match findings.search_list_waste {
            0 => String::new(),
            count => format!(", {count} search list waste"),
        };
        let servfail = match findings.servfail_storms {
            0 => String::new(),
            count => format!(", {count} SERVFAIL storm"),
        };
        let fragmented = match findings.fragmented_replies_lost {
            0 => String::new(),
            count => format!(", {count} fragmented reply lost"),
        };
        self.line(&format!(
            "findings: {} loop{possible}, {} unexpected source, {} timeout{folded}{truncated}{search}{servfail}{fragmented}",
            findings.loops, findings.unexpected_sources, findings.timeouts
        ))?;
        let evicted: Vec<String> = summary
            .evictions
            .iter()
            .filter(|(_, &count)| count > 0)
            .map(|(stage, count)| format!("{stage} {count}"))
            .collect();
        if !evicted.is_empty() {
            self.line(&format!(
                "evictions (tables full, findings may be missed): {}",
                evicted.join(", ")
            ))?;
        }
        if !summary.servers.is_empty() {
            self.line(&format!(
                "  {:<40} {:>8} {:>9} {:>9} {:>9} {:>9}  rcodes",
                "server", "answered", "p50", "p90", "p99", "max"
            ))?;
            for server in &summary.servers {
                let mut rcodes: Vec<String> = server
                    .rcodes
                    .iter()
                    .map(|(&rcode, count)| format!("{} {count}", mnemonic::rcode(rcode)))
                    .collect();
                if server.truncated > 0 {
                    rcodes.push(format!("truncated {}", server.truncated));
                }
                self.line(&format!(
                    "  {:<40} {:>8} {:>9} {:>9} {:>9} {:>9}  {}",
                    server.server.to_string(),
                    server.answered,
                    latency(server.p50),
                    latency(server.p90),
                    latency(server.p99),
                    latency(server.max),
                    rcodes.join(", ")
                ))?;
            }
        }
        if let Some(lookups) = &summary.lookups {
            self.lookups_summary(lookups)?;
        }
        match source {
            SummarySource::Kernel(kernel) => self.kernel_summary(kernel)?,
            SummarySource::CaptureFile(file) => self.capture_file_summary(file)?,
        }
        self.out.flush()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// `service`: where the hop's packet was sent, when a DNAT sent it to `hop.dst` instead.
fn hop_line(hop: &Hop, service: Option<SocketAddr>) -> String {
    let via = service.map_or(String::new(), |service| format!(" ({service} via DNAT)"));
    let crossing = crossing(&hop.point.leaves, &hop.point.enters)
        .map_or(String::new(), |crossing| format!("  [{crossing}]"));
    format!(
        "  {}  {:<16} {:<7}  {} -> {}{via}  id {}{crossing}",
        time_of_day(hop.ts),
        hop.point.ifname,
        hop.point.direction.as_str(),
        hop.src,
        hop.dst,
        hop.id
    )
}

/// The `--packets` line for `obs` (`12:00:01.123 cni0 ingress udp 10.244.0.2:41234 ->
/// 169.254.25.10:53 id 4242 query A www.example.test.  [enters node]`), built in `text` a
/// piece at a time: every DNS packet goes through here, and one `format!` of all the pieces
/// was two fifths of what `analyze --packets` spent.
fn packet_line(obs: &Observation, names: &Names, text: &mut String) {
    text.clear();
    write_time_of_day(obs.ts, text);
    for part in [
        &obs.point.ifname,
        obs.point.direction.as_str(),
        obs.transport.as_str(),
    ] {
        text.push(' ');
        text.push_str(part);
    }
    text.push(' ');
    push_socket_addr(text, &obs.src);
    text.push_str(" -> ");
    push_socket_addr(text, &obs.dst);
    let _ = write!(text, " id {} ", obs.id);
    if obs.is_response {
        text.push_str("reply ");
        text.push_str(&mnemonic::rcode(obs.rcode));
    } else {
        text.push_str("query");
    }
    if obs.opcode != 0 {
        text.push_str(" opcode ");
        text.push_str(&mnemonic::opcode(obs.opcode));
    }
    match &obs.question {
        Some(question) => {
            text.push(' ');
            text.push_str(&mnemonic::qtype(question.qtype));
            text.push(' ');
            question.name.write_presented(names, text);
        }
        None => text.push_str(" (no question)"),
    }
    if let Some(crossing) = crossing(&obs.point.leaves, &obs.point.enters) {
        let _ = write!(text, "  [{crossing}]");
    }
}

fn push_socket_addr(text: &mut String, addr: &SocketAddr) {
    match addr {
        SocketAddr::V4(addr) => ipv4_pieces(addr, |piece| text.push_str(piece)),
        SocketAddr::V6(addr) => {
            let _ = write!(text, "{addr}");
        }
    }
}

/// Where a packet went: `leaves pod 10.244.0.3`, `enters node`, `within pod ...` (a loopback),
/// `pod A -> node`.
enum Crossing<'a> {
    Within(&'a Namespace),
    Between(&'a Namespace, &'a Namespace),
    Leaves(&'a Namespace),
    Enters(&'a Namespace),
}

/// `None` between two unwatched sides.
fn crossing<'a>(
    leaves: &'a Option<Namespace>,
    enters: &'a Option<Namespace>,
) -> Option<Crossing<'a>> {
    match (leaves, enters) {
        (Some(left), Some(entered)) if left == entered => Some(Crossing::Within(left)),
        (Some(left), Some(entered)) => Some(Crossing::Between(left, entered)),
        (Some(left), None) => Some(Crossing::Leaves(left)),
        (None, Some(entered)) => Some(Crossing::Enters(entered)),
        (None, None) => None,
    }
}

impl std::fmt::Display for Crossing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Within(namespace) => write!(f, "within {namespace}"),
            Self::Between(left, entered) => write!(f, "{left} -> {entered}"),
            Self::Leaves(left) => write!(f, "leaves {left}"),
            Self::Enters(entered) => write!(f, "enters {entered}"),
        }
    }
}

/// The service `found` records a DNAT from to `hop`'s destination; `None` unless exactly one.
fn dnat_service(found: &LoopFinding, hop: &Hop) -> Option<SocketAddr> {
    let mut services = found
        .dnat
        .iter()
        .filter(|dnat| dnat.backend == hop.dst)
        .map(|dnat| dnat.service);
    let service = services.next()?;
    services.next().is_none().then_some(service)
}

/// Counts on one line, `name count, ...`; `none` when there are none.
fn counts(counts: &Counts) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(name, count)| format!("{name} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `text` has a byte of a control character's UTF-8: a C0 control or DEL (one byte
/// below 0x20, or 0x7f), or the lead byte 0xc2 that C1 controls (U+0080 to U+009F) share with
/// a few printable characters. Decoding every character of every packet line to ask it was a
/// tenth of what `analyze --packets --output text` spent; bytes are looked at 32 at once, each
/// block without a branch per byte, which the compiler turns into vector instructions.
fn may_hold_control(text: &str) -> bool {
    text.as_bytes().chunks(32).any(|block| {
        block.iter().fold(false, |found, &byte| {
            found | (byte < 0x20) | (byte == 0x7f) | (byte == 0xc2)
        })
    })
}

fn latency(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1000.0;
    if millis < 10.0 {
        format!("{millis:.2}ms")
    } else if millis < 1000.0 {
        format!("{millis:.1}ms")
    } else {
        format!("{:.2}s", millis / 1000.0)
    }
}

/// `text` with every control character escaped: `\DDD` (as dig escapes bytes in names) for
/// ASCII ones, `\u{..}` for the rest.
fn printable(text: &str) -> Cow<'_, str> {
    if !may_hold_control(text) || !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if c.is_ascii_control() => {
                let _ = write!(escaped, "\\{:03}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
            }
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests;
