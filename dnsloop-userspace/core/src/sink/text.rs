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
        hex, mnemonic, probe_name,
        time::{time_of_day, write_time_of_day},
    },
    schema::{CaptureFileSummary, Counts, InterfaceCount, KernelSummary, SummarySource},
};

pub struct TextSink<W> {
    out: W,
    /// The `--packets` line being written, its buffer kept from one packet to the next.
    packet_line: String,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            packet_line: String::new(),
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
        Ok(())
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
            "packets: read {}, dns {}, not_dns {}, malformed {}, unsupported_link {}, unplaced {}",
            packets.read,
            packets.dns,
            packets.not_dns,
            packets.malformed,
            packets.unsupported_link,
            packets.unplaced
        ))?;
        self.line(&format!("malformed: {}", counts(&file.malformed)))
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
        }
        self.out.flush()
    }

    fn packet(&mut self, obs: &Observation) -> io::Result<()> {
        let text = &mut self.packet_line;
        packet_line(obs, text);
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
        self.line(&format!(
            "  bundle: {} ({joined}packets from {} to {}, written then{suppressed})",
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
        let _ = write!(text, " (a sample; all are counted): {}", hex(&sample.head));
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
        self.line(&format!(
            "findings: {} loop{possible}, {} unexpected source, {} timeout{folded}",
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
                let rcodes: Vec<String> = server
                    .rcodes
                    .iter()
                    .map(|(&rcode, count)| format!("{} {count}", mnemonic::rcode(rcode)))
                    .collect();
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
    let crossing = crossing(&hop.leaves, &hop.enters)
        .map_or(String::new(), |crossing| format!("  [{crossing}]"));
    format!(
        "  {}  {:<16} {:<7}  {} -> {}{via}  id {}{crossing}",
        time_of_day(hop.ts),
        hop.ifname,
        hop.direction.as_str(),
        hop.src,
        hop.dst,
        hop.id
    )
}

/// The `--packets` line for `obs` (`12:00:01.123 cni0 ingress udp 10.244.0.2:41234 ->
/// 169.254.25.10:53 id 4242 query A www.example.test.  [enters node]`), built in `text` a
/// piece at a time: every DNS packet goes through here, and one `format!` of all the pieces
/// was two fifths of what `analyze --packets` spent.
fn packet_line(obs: &Observation, text: &mut String) {
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
            question.name.write_presentation(text);
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
mod tests {
    use dnsloop_ebpf::parse::Probe;

    use super::*;
    use crate::{
        finding::ConntrackEvidence,
        observation::{DnsName, Question},
        testkit::observations::*,
        testkit::samples::*,
    };

    fn written(write: impl FnOnce(&mut TextSink<&mut Vec<u8>>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut TextSink::new(&mut out)).expect("writing to memory");
        String::from_utf8(out).expect("text is UTF-8")
    }

    #[test]
    fn a_malformed_sample_is_one_line() {
        assert_eq!(
            written(|sink| sink.malformed(&malformed_sample())),
            "12:00:01.500  MALFORMED  dns_compression_pointer on cni0 ingress, \
             10.244.0.2:41234 -> 10.96.0.10:53 (a sample; all are counted): 12340100c00c\n"
        );
    }

    #[test]
    fn a_loop_is_one_line_then_its_path() {
        let mut first = a_loop(Probe::CoreDns);
        if let Finding::Loop(found) = &mut first {
            found.count = 1;
            found.since = found.ts;
        }
        let text = written(|sink| sink.finding(&first));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "12:00:01.123  LOOP  x1 [coredns probe]  www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream  [loop_id 0123456789abcdef]",
                "  12:00:01.001  cni0             egress   10.244.0.1:50000 -> 10.244.0.3:53  id 1000  [leaves node]",
                "  12:00:01.123  cni0             ingress  10.244.0.3:40000 -> 169.254.25.10:53  id 2000  [enters node]",
            ]
        );
    }

    #[test]
    fn a_possible_loop_is_tagged_apart_and_says_what_was_not_seen() {
        let text = written(|sink| sink.finding(&a_possible_loop()));
        let first = text.lines().next().expect("a line");
        assert!(
            first.starts_with("12:00:01.123  POSSIBLE LOOP  x1  www.example.test. A: node"),
            "{first}"
        );
        assert!(first.contains("Not confirmed: nothing shows that node holds 169.254.25.10"));
    }

    #[test]
    fn a_repeated_loop_is_one_line_with_its_count() {
        let text = written(|sink| sink.finding(&a_loop(Probe::CoreDns)));
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            ["12:00:01.123  LOOP  x3 [coredns probe]  www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream  [loop_id 0123456789abcdef]"]
        );
    }

    #[test]
    fn a_loop_through_a_cluster_ip_names_the_service_on_its_line_and_path() {
        let text = written(|sink| sink.finding(&a_loop_through_a_cluster_ip()));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "12:00:01.123  LOOP  x1  www.example.test. A: node -> 10.96.0.10 (DNAT -> 10.244.0.3) (pod 10.244.0.3) -> 169.254.25.10 (node) (2 hops): check the upstream  [loop_id 0123456789abcdef]",
                "  12:00:01.001  cni0             egress   10.244.0.1:50000 -> 10.244.0.3:53 (10.96.0.10:53 via DNAT)  id 1000  [leaves node]",
                "  12:00:01.123  cni0             ingress  10.244.0.3:40000 -> 169.254.25.10:53  id 2000  [enters node]",
            ]
        );
    }

    #[test]
    fn unexpected_sources_show_the_evidence_once_an_enricher_added_it() {
        let bare = written(|sink| sink.finding(&an_unexpected_source(None)));
        assert_eq!(bare.lines().count(), 1);
        assert!(bare.starts_with(
            "12:00:02.000  UNEXPECTED SOURCE  www.example.test. A  reply to 10.244.0.2:41234"
        ));
        let evidence = ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.3:53"),
            unreplied: true,
        };
        let enriched = written(|sink| sink.finding(&an_unexpected_source(Some(evidence))));
        let lines: Vec<&str> = enriched.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "  cause: br_netfilter is off",
                "  conntrack: sent to 10.96.0.10:53, reply expected from 10.244.0.3:53, never replied",
            ]
        );
    }

    #[test]
    fn a_slow_lookup_is_one_line_then_its_hops_with_the_slowest_marked() {
        let text = written(|sink| sink.finding(&a_slow_lookup()));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].starts_with("12:00:00.153  SLOW  153.0ms  pod 10.244.0.2 waited"),
            "{text}"
        );
        assert!(lines[3].contains("pod 10.244.0.3 -> 10.255.0.53:53 (off the node via eth0)  id 2000  NOERROR 150.0ms, own 150.0ms  <- slowest"), "{text}");
        assert!(
            lines[2].contains("node -> 10.96.0.10:53 (DNAT -> 10.244.0.3:53, pod 10.244.0.3)"),
            "{text}"
        );
        // Each forward is indented under the query it forwards.
        let indent = |line: &str| line.len() - line.trim_start().len();
        assert!(
            indent(lines[1]) < indent(lines[2]) && indent(lines[2]) < indent(lines[3]),
            "{text}"
        );
    }

    #[test]
    fn the_summary_times_each_servers_hops_when_lookups_were_followed() {
        let summary = Summary {
            lookups: Some(lookups_followed()),
            ..a_summary()
        };
        let text =
            written(|sink| sink.summary(&summary, &SummarySource::Kernel(Default::default())));
        assert!(
            text.contains("lookups: 20 followed, 1 slower than 100.0ms (1 reported, 0 suppressed)"),
            "{text}"
        );
        assert!(text.contains("10.255.0.53:53"), "{text}");
    }

    #[test]
    fn a_timeout_is_one_line() {
        assert_eq!(
            written(|sink| sink.finding(&a_timeout())),
            "12:00:03.000  TIMEOUT  no answer from 10.255.0.99:53 for corp.example. A (client 10.244.0.3:5353, id 77) after 2.0s\n"
        );
    }

    #[test]
    fn a_repeated_timeout_is_one_line_with_its_count() {
        let Finding::Timeout(mut found) = a_timeout() else {
            unreachable!("a timeout")
        };
        found.count = 37;
        found.summary = "no answer from 10.255.0.99:53 for corp.example. A: 37 more queries".into();
        assert_eq!(
            written(|sink| sink.finding(&Finding::Timeout(found))),
            "12:00:03.000  TIMEOUT x37  no answer from 10.255.0.99:53 for corp.example. A: 37 more queries\n"
        );
    }

    #[test]
    fn a_loop_with_unanswered_queries_counts_them_on_its_line() {
        let Finding::Loop(mut found) = a_loop(Probe::None) else {
            unreachable!("a loop")
        };
        found.unanswered = 4567;
        let text = written(|sink| sink.finding(&Finding::Loop(found)));
        assert!(
            text.starts_with("12:00:01.123  LOOP  x3, 4567 unanswered  www.example.test. A"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_says_how_many_timeouts_were_folded() {
        let mut summary = a_summary();
        summary.findings.timeouts = 2;
        summary.timeouts.queries = 5012;
        summary.timeouts.in_loops = 4980;
        summary.timeouts.in_repeats = 30;
        let text = written(|sink| sink.summary(&summary, &kernel_numbers()));
        assert_eq!(
            text.lines().nth(1),
            Some(
                "findings: 0 loop, 0 unexpected source, 2 timeout (5012 queries timed out: 4980 \
                 counted in loops' reports, 30 in repeated timeouts)"
            )
        );
    }

    #[test]
    fn packets_are_one_line_each() {
        let asked = query("www.example.test.")
            .id(4242)
            .at_ms(1_123)
            .seen(NODE_FROM_BRIDGE);
        let answered = reply("www.example.test.")
            .id(4242)
            .rcode(3)
            .tcp()
            .at_ms(1_124)
            .seen(CLIENT_IN);
        let text = written(|sink| {
            sink.packet(&asked)?;
            sink.packet(&answered)
        });
        assert_eq!(
            text,
            "12:00:01.123 cni0 ingress udp 10.244.0.2:41234 -> 169.254.25.10:53 id 4242 query A www.example.test.  [enters node]\n\
             12:00:01.124 veth-client egress tcp 10.244.0.2:41234 -> 169.254.25.10:53 id 4242 reply NXDOMAIN A www.example.test.  [enters pod 10.244.0.2]\n"
        );
    }

    #[test]
    fn control_bytes_never_reach_the_terminal() {
        let mut obs = query("x.test.").seen(CLIENT_OUT);
        obs.question = DnsName::from_wire(b"\x09\x1b[31mred\x07\x00").map(|name| Question {
            name,
            qtype: A,
            qclass: 1,
        });
        obs.point.ifname = "eth\u{1b}]0;owned\u{7}\u{85}".into();
        let text = written(|sink| sink.packet(&obs));
        assert!(
            !text.trim_end_matches('\n').chars().any(char::is_control),
            "{text:?}"
        );
        assert!(text.contains("eth\\027]0;owned\\007\\u{85} "), "{text}");
        assert!(text.contains(" A \\027[31mred\\007."), "{text}");
    }

    #[test]
    fn the_byte_scan_misses_no_control_character() {
        let mut utf8 = [0; 4];
        for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
            if c.is_control() {
                assert!(may_hold_control(c.encode_utf8(&mut utf8)), "{c:?}");
            }
        }
        assert!(!may_hold_control(
            "12:00:01.123456 veth-client ingress udp é ü"
        ));
    }

    #[test]
    fn summary_table_with_the_callers_numbers() {
        let text = written(|sink| sink.summary(&a_summary(), &kernel_numbers()));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "summary: 1234 observations (2 out of order), 1 queries unanswered at the end"
        );
        assert_eq!(lines[1], "findings: 0 loop, 0 unexpected source, 0 timeout");
        assert_eq!(
            lines[2],
            "evictions (tables full, findings may be missed): timeout 5"
        );
        assert!(
            lines[3].contains("server") && lines[3].contains("p99"),
            "{text}"
        );
        assert!(lines[4].starts_with("  169.254.25.10:53 "), "{text}");
        assert!(
            lines[4]
                .ends_with(" 30    1.20ms    3.00ms    10.0ms    12.0ms  NOERROR 28, NXDOMAIN 2"),
            "{text}"
        );
        assert!(!text.lines().any(|line| line.ends_with(' ')), "{text}");
        assert!(lines.contains(&"lost_events: 3"), "{text}");
        assert!(
            lines.contains(&"kernel drops of DNS packets: NETFILTER_DROP 3"),
            "{text}"
        );
        assert!(lines.contains(&"kernel: packets 10"), "{text}");
        assert!(
            lines
                .iter()
                .any(|line| line.contains("cni0") && line.contains("ingress")),
            "{text}"
        );
    }
}
