//! What `dnsloop trace --output json` (or `analyze`) printed, read back through the records
//! dnsloop declares its output with (`dnsloop_core::schema`): its findings and its end-of-run
//! summary. Every line must be one of them, so the tests catch any drift of the output from
//! its schema.
use std::{
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context as _, Result};
use dnsloop_core::schema::{
    DropRecord, FragmentationRecord, LoopRecord, Record, SearchListRecord, ServfailRecord,
    SummaryRecord, TimeoutRecord, TruncationRecord, UnexpectedSourceRecord,
};

use crate::tracer::TracerOutput;

/// A name as dnsloop prints it: with the root's trailing dot.
pub fn fqdn(name: &str) -> String {
    format!("{name}.")
}

/// Parses the one shape dnsloop prints, `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds).
pub fn parse_rfc3339_millis(text: &str) -> Option<SystemTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (clock, millis) = time.split_once('.')?;
    let mut clock = clock.splitn(3, ':').map(str::parse::<u64>);
    let (hour, minute, second) = (
        clock.next()?.ok()?,
        clock.next()?.ok()?,
        clock.next()?.ok()?,
    );
    let millis: u64 = millis.parse().ok()?;
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// What a loop report says about the packets, leaving out what only the live node could add
/// (conntrack's ClusterIP behind a DNAT'ed hop, and the sentence naming it): what `analyze`
/// of a capture of the same packets reports alike.
pub fn loop_as_seen(found: &LoopRecord) -> (String, String, String, u64, Vec<String>) {
    (
        found.loop_id.clone(),
        found.qname.clone(),
        found.qtype.clone(),
        found.count,
        found
            .path
            .iter()
            .map(|hop| {
                format!(
                    "{} {} {} {} -> {} id {}",
                    hop.ts, hop.ifname, hop.dir, hop.src, hop.dst, hop.id
                )
            })
            .collect(),
    )
}

/// Everything one `dnsloop trace --output json` run printed.
pub struct Trace {
    pub records: Vec<Record>,
    /// As printed, for assertion messages.
    pub stdout: String,
    pub stderr: String,
}

impl Trace {
    /// Reads a finished run. Fails if it did not exit successfully, if a line of stdout is not
    /// a record, or if there is not exactly one summary.
    pub fn from_output(output: TracerOutput) -> Result<Trace> {
        if !output.status.success() {
            bail!(
                "dnsloop trace exited with {}:\n{}{}",
                output.status,
                output.stdout,
                output.stderr
            );
        }
        let records = output
            .stdout
            .lines()
            .enumerate()
            .map(|(number, line)| {
                serde_json::from_str(line)
                    .with_context(|| format!("stdout line {}: {line}", number + 1))
            })
            .collect::<Result<Vec<Record>>>()?;
        let summaries = records
            .iter()
            .filter(|record| matches!(record, Record::Summary(_)))
            .count();
        if summaries != 1 {
            bail!(
                "expected one summary at exit, found {summaries}:\n{}",
                output.stdout
            );
        }
        Ok(Trace {
            records,
            stdout: output.stdout,
            stderr: output.stderr,
        })
    }

    pub fn loops(&self) -> Vec<&LoopRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Loop(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    /// Fails, naming `context`, if it reports a loop or a possible one: where dnsloop has all
    /// the evidence (live, or a capture that shows it), a fault that is no loop is neither.
    pub fn assert_no_loop(&self, context: &str) {
        assert!(
            self.loops().is_empty(),
            "{context}: a loop where there is none:\n{self}"
        );
        assert!(
            self.possible_loops().is_empty(),
            "{context}: a possible loop where there is none:\n{self}"
        );
    }

    /// The possible-loop reports, in the order printed.
    pub fn possible_loops(&self) -> Vec<&LoopRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::PossibleLoop(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    /// The possible-loop reports for `qname` (with its trailing dot), in the order printed.
    pub fn possible_loops_for(&self, qname: &str) -> Vec<&LoopRecord> {
        self.possible_loops()
            .into_iter()
            .filter(|found| found.qname.eq_ignore_ascii_case(qname))
            .collect()
    }

    /// The loop reports for `qname` (with its trailing dot), in the order they were printed.
    pub fn loops_for(&self, qname: &str) -> Vec<&LoopRecord> {
        self.loops()
            .into_iter()
            .filter(|found| found.qname.eq_ignore_ascii_case(qname))
            .collect()
    }

    pub fn unexpected_sources(&self) -> Vec<&UnexpectedSourceRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::UnexpectedSource(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn timeouts(&self) -> Vec<&TimeoutRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Timeout(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn truncations_not_retried(&self) -> Vec<&TruncationRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::TruncatedNotRetried(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn search_list_wastes(&self) -> Vec<&SearchListRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::SearchListWaste(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn servfail_storms(&self) -> Vec<&ServfailRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::ServfailStorm(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn fragmented_replies_lost(&self) -> Vec<&FragmentationRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::FragmentedReplyLost(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn drops(&self) -> Vec<&DropRecord> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Drop(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn summary(&self) -> &SummaryRecord {
        self.records
            .iter()
            .find_map(|record| match record {
                Record::Summary(summary) => Some(summary),
                _ => None,
            })
            .expect("from_output checked there is one summary")
    }
}

/// The tracer's whole output, for assertion messages.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- dnsloop stdout ---\n{}--- dnsloop stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// What the tests ask of a summary.
pub trait SummaryExt {
    /// DNS packets counted on `ifname` in direction `dir` (`ingress`, `egress`).
    fn dns_packets(&self, ifname: &str, dir: &str) -> u64;

    /// The kernel programs' counter `name` (`dns_port_unreachable`); `None` when not listed,
    /// or for `analyze`, which has no kernel.
    fn kernel_counter(&self, name: &str) -> Option<u64>;

    /// Packets the kernel could not hand to userspace: every one may hide a finding. Zero for
    /// `analyze`, which has no kernel.
    fn lost_events(&self) -> u64;
}

impl SummaryExt for SummaryRecord {
    fn dns_packets(&self, ifname: &str, dir: &str) -> u64 {
        self.interfaces()
            .iter()
            .filter(|count| count.ifname == ifname && count.dir == dir)
            .map(|count| count.dns_packets)
            .sum()
    }

    fn kernel_counter(&self, name: &str) -> Option<u64> {
        self.kernel()?.kernel.get(name).copied()
    }

    fn lost_events(&self) -> u64 {
        self.kernel().map_or(0, |kernel| kernel.lost_events)
    }
}

/// What the tests ask of a loop report.
pub trait LoopRecordExt {
    /// Whether some hop of the path was seen on interface `ifname`.
    fn crosses(&self, ifname: &str) -> bool;

    /// Whether some hop of the path left or entered the namespace named `namespace`.
    fn passes_through(&self, namespace: &str) -> bool;

    /// How long after the first packet of its path the loop was reported.
    fn reported_after(&self) -> Option<Duration>;
}

impl LoopRecordExt for LoopRecord {
    fn crosses(&self, ifname: &str) -> bool {
        self.path.iter().any(|hop| hop.ifname == ifname)
    }

    fn passes_through(&self, namespace: &str) -> bool {
        self.path.iter().any(|hop| {
            hop.leaves.as_deref() == Some(namespace) || hop.enters.as_deref() == Some(namespace)
        })
    }

    fn reported_after(&self) -> Option<Duration> {
        let first = self.path.iter().map(|hop| hop.ts).min()?;
        Some(self.ts.since(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_timestamps_dnsloop_prints() {
        let at = parse_rfc3339_millis("2025-01-01T12:00:01.123Z").expect("parses");
        assert_eq!(at, UNIX_EPOCH + Duration::from_millis(1_735_732_801_123));
        assert_eq!(
            parse_rfc3339_millis("1970-01-01T00:00:00.000Z"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_rfc3339_millis("2024-02-29T23:59:59.999Z"),
            Some(UNIX_EPOCH + Duration::from_millis(1_709_251_199_999))
        );
        for bad in [
            "2025-01-01 12:00:01.123Z",
            "2025-01-01T12:00:01.123",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_every_kind_of_line_dnsloop_prints() {
        // As dnsloop's JSON sink writes them.
        let lines = [
            r#"{"kind":"loop","ts":"2025-01-01T12:00:03.001Z","loop_id":"0123456789abcdef","since":"2025-01-01T12:00:01.001Z","qname":"www.example.test.","qtype":"A","count":40,"rounds_per_s":20.0,"unanswered":0,"path":[{"ts":"2025-01-01T12:00:01.001Z","ifname":"cni0","dir":"egress","src":"10.244.0.1:50000","dst":"10.244.0.3:53","id":1000,"leaves":"node","enters":null},{"ts":"2025-01-01T12:00:01.123Z","ifname":"cni0","dir":"ingress","src":"10.244.0.3:40000","dst":"169.254.25.10:53","id":2000,"leaves":null,"enters":"node"}],"off_node":[{"left_via":"vxlan0","sent_to":"10.244.1.3:53","back_from":"10.244.1.0:41000","back_via":"vxlan0"}],"servers":["10.244.0.3","169.254.25.10"],"probe":null,"summary":"loop: www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream","dnat":[],"unconfirmed":[],"node":"node-\"a\""}"#,
            r#"{"kind":"unexpected_source","ts":"2025-01-01T12:00:02.000Z","client":"10.244.0.2:41234","expected":"10.96.0.10:53","actual":"10.244.0.3:53","id":4242,"qname":"www.example.test.","qtype":"A","conntrack":{"original_dst":"10.96.0.10:53","reply_src":"10.244.0.3:53","unreplied":false},"cause":"br_netfilter is off","summary":"reply to 10.244.0.2:41234 id 4242 came from 10.244.0.3:53, but the query went to 10.96.0.10:53: the client's socket drops it","node":"node-\"a\""}"#,
            r#"{"kind":"timeout","ts":"2025-01-01T12:00:03.000Z","client":"10.244.0.3:5353","server":"10.255.0.99:53","id":77,"count":1,"qname":"corp.example.","qtype":"A","waited_ms":2000,"dropped":null,"summary":"no answer from 10.255.0.99:53 for corp.example. A (client 10.244.0.3:5353, id 77) after 2.0s","node":"node-\"a\""}"#,
            r#"{"kind":"packet","ts":"2025-01-01T12:00:01.123Z","ifname":"cni0","dir":"ingress","proto":"udp","src":"10.244.0.2:41234","dst":"169.254.25.10:53","id":4242,"qr":false,"opcode":"QUERY","rcode":"NOERROR","qname":"www.example.test.","qtype":"A","size":40,"leaves":null,"enters":"node","node":"node-\"a\""}"#,
            r#"{"kind":"malformed","ts":"1970-01-01T12:00:01.500Z","ifname":"cni0","dir":"ingress","reason":"dns_compression_pointer","src":"10.244.0.2:41234","dst":"10.96.0.10:53","head":"12340100c00c","node":"node-\"a\""}"#,
            r#"{"kind":"summary","ts":"2025-01-01T12:01:00.000Z","observations":1234,"late_observations":2,"findings":{"loop":0,"possible_loop":0,"unexpected_source":0,"timeout":0,"drop":0,"truncated_not_retried":0},"timeouts":{"queries":0,"in_loops":0,"in_repeats":0},"evictions":{"reorder":0,"timeout":5},"unanswered_at_end":1,"servers":[{"server":"169.254.25.10:53","count":30,"p50_ms":1.2,"p90_ms":3.0,"p99_ms":10.0,"max_ms":12.0,"rcodes":{"NOERROR":28,"NXDOMAIN":2},"truncated":1}],"interfaces":[{"ifname":"cni0","dir":"ingress","dns_packets":4,"packets":10},{"ifname":"veth-a-very-long-name-x","dir":"egress","dns_packets":0,"packets":123456789}],"kernel":{"packets":10,"dns_packets":4,"dns_messages":4,"non_first_fragments":0,"tcp_splits":1,"tcp_messages_beyond_limit":0,"lost_records":3,"streamed_records":2,"dns_port_unreachable":1,"unplaced_packets":0},"malformed":{"dns_compression_pointer":2,"bad_ihl":1},"drops":{"NETFILTER_DROP":2},"lost_events":3,"undecodable_records":1,"unplaced_records":0,"kernel_lacks":["tcx"],"node":"node-\"a\""}"#,
            r#"{"kind":"summary","ts":"2025-01-01T12:01:00.000Z","observations":1234,"late_observations":2,"findings":{"loop":0,"possible_loop":0,"unexpected_source":0,"timeout":0,"drop":0,"truncated_not_retried":0},"timeouts":{"queries":0,"in_loops":0,"in_repeats":0},"evictions":{"reorder":0,"timeout":5},"unanswered_at_end":1,"servers":[{"server":"169.254.25.10:53","count":30,"p50_ms":1.2,"p90_ms":3.0,"p99_ms":10.0,"max_ms":12.0,"rcodes":{"NOERROR":28,"NXDOMAIN":2},"truncated":1}],"capture":{"file":"/tmp/x y.pcap","format":"pcapng","complete":false,"note":"truncated \"here\""},"interfaces":[{"ifname":"any","dir":"ingress","dns_packets":4,"packets":10}],"capture_interfaces":[{"ifname":"any","linktype":113,"placed_by":"addresses","node_mac":null},{"ifname":"eth0","linktype":1,"placed_by":"name","node_mac":"02:00:00:00:00:01"}],"packets":{"read":10,"dns":4,"not_dns":5,"malformed":1,"unsupported_link":0,"unplaced":0},"malformed":{"bad_ihl":1},"node":"node-\"a\""}"#,
            r#"{"kind":"truncated_not_retried","ts":"2025-01-01T12:00:02.010Z","client":"10.244.0.2:41234","client_namespace":"pod default/alpine","server":"169.254.25.10:53","id":4242,"count":1,"qname":"big.example.test.","qtype":"A","size":508,"waited_ms":2000,"summary":"10.244.0.2 (pod default/alpine) took a truncated answer","node":"node-a"}"#,
        ];
        let records: Vec<Record> = lines
            .iter()
            .map(|line| serde_json::from_str(line).expect(line))
            .collect();
        let Record::Loop(found) = &records[0] else {
            panic!("{:?}", records[0]);
        };
        assert_eq!(found.reported_after(), Some(Duration::from_millis(2_000)));
        assert!(found.crosses("cni0") && !found.crosses("lo"));
        assert!(found.passes_through("node") && !found.passes_through("pod 10.244.0.2"));
        let Record::UnexpectedSource(found) = &records[1] else {
            panic!("{:?}", records[1]);
        };
        assert!(found.conntrack.as_ref().is_some_and(|c| !c.unreplied));
        assert!(matches!(&records[2], Record::Timeout(t) if t.waited_ms == 2000));
        assert!(
            matches!(&records[3], Record::Packet(p) if p.qname.as_deref() == Some("www.example.test."))
        );
        assert!(
            matches!(&records[4], Record::Malformed(m) if m.reason == "dns_compression_pointer")
        );
        let Record::Summary(traced) = &records[5] else {
            panic!("{:?}", records[5]);
        };
        assert_eq!(traced.dns_packets("cni0", "ingress"), 4);
        assert_eq!(traced.kernel_counter("dns_port_unreachable"), Some(1));
        assert_eq!(traced.lost_events(), 3);
        let Record::Summary(analysed) = &records[6] else {
            panic!("{:?}", records[6]);
        };
        assert_eq!(analysed.dns_packets("any", "ingress"), 4);
        assert_eq!(analysed.kernel_counter("dns_port_unreachable"), None);
        assert_eq!(analysed.lost_events(), 0);
        assert!(
            matches!(&records[7], Record::TruncatedNotRetried(t) if t.server.port() == 53 && t.size == 508)
        );
    }
}
