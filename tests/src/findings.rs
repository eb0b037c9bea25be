//! What `dnsloop trace --output json` printed, typed: its findings and its end-of-run summary.
//!
//! Only the fields the end-to-end tests look at are read; fields added later are ignored, so
//! the tests keep working while the output grows.
use std::{
    collections::BTreeMap,
    fmt,
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Deserializer};

use crate::tracer::TracerOutput;

/// One line of `dnsloop trace --output json`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Loop(LoopFinding),
    UnexpectedSource(UnexpectedSourceFinding),
    Timeout(TimeoutFinding),
    Summary(Summary),
    /// A DNS packet (`--packets`), or a kind these tests do not know.
    #[serde(other)]
    Other,
}

/// A question that re-entered a namespace along a chain of forwards.
#[derive(Clone, Debug, Deserialize)]
pub struct LoopFinding {
    pub ts: Timestamp,
    /// With the trailing dot: `www.example.test.`.
    pub qname: String,
    pub qtype: String,
    pub count: u64,
    /// Queries of the question that went unanswered while it looped, so far.
    pub unanswered: u64,
    pub path: Vec<Hop>,
    pub servers: Vec<IpAddr>,
    /// `coredns` or `dnsmasq` when the looping question is that server's loop probe.
    pub probe: Option<String>,
    pub summary: String,
    /// The services (ClusterIPs) conntrack says DNAT'ed forwards of the path were sent to.
    pub dnat: Vec<Dnat>,
    /// The same on every node the loop crosses.
    pub loop_id: String,
    /// Where the cycle left the node and came back, out of sight.
    pub off_node: Vec<OffNode>,
    /// The node the tracer ran on.
    pub node: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OffNode {
    pub left_via: String,
    pub sent_to: SocketAddr,
    pub back_from: SocketAddr,
    pub back_via: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Dnat {
    pub service: SocketAddr,
    pub backend: SocketAddr,
}

/// One packet of a loop's path.
#[derive(Clone, Debug, Deserialize)]
pub struct Hop {
    pub ts: Timestamp,
    pub ifname: String,
    pub dir: String,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    /// The namespaces the packet left and entered there (`node`, `pod 10.244.0.3`, `pod
    /// kube-system/coredns-5d78c9869d-abcde`); `None` for a side that is not watched.
    pub leaves: Option<String>,
    pub enters: Option<String>,
}

/// A reply that reached its client from another address than the query went to.
#[derive(Clone, Debug, Deserialize)]
pub struct UnexpectedSourceFinding {
    pub ts: Timestamp,
    pub client: SocketAddr,
    pub expected: SocketAddr,
    pub actual: SocketAddr,
    pub id: u16,
    pub qname: String,
    pub qtype: String,
    pub conntrack: Option<ConntrackEvidence>,
    pub cause: Option<String>,
    pub summary: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ConntrackEvidence {
    pub original_dst: SocketAddr,
    pub reply_src: SocketAddr,
    pub unreplied: bool,
}

/// A query that got no reply in time.
#[derive(Clone, Debug, Deserialize)]
pub struct TimeoutFinding {
    pub ts: Timestamp,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub id: u16,
    /// Queries this reports: 1, or those since this server's previous report for the name.
    pub count: u64,
    pub qname: String,
    pub qtype: String,
    pub waited_ms: u64,
    pub summary: String,
}

/// The end-of-run summary.
#[derive(Clone, Debug, Deserialize)]
pub struct Summary {
    /// DNS messages the analyzers were given.
    pub observations: u64,
    pub interfaces: Vec<InterfaceCount>,
    /// The kernel programs' counters, by name (`packets`, `dns_packets`, `lost_records`, ...).
    /// `analyze` has none: it reads a file.
    #[serde(default)]
    pub kernel: BTreeMap<String, u64>,
    /// Packets the kernel could not hand to userspace: every one may hide a finding. Zero for
    /// `analyze`, which has no kernel.
    #[serde(default)]
    pub lost_events: u64,
    /// Answers per server, as their clients received them.
    pub servers: Vec<ServerCount>,
    pub timeouts: TimeoutCounts,
}

/// Every query that timed out, and how many were counted in loops' and repeated timeouts'
/// reports rather than reported one by one.
#[derive(Clone, Debug, Deserialize)]
pub struct TimeoutCounts {
    pub queries: u64,
    pub in_loops: u64,
    pub in_repeats: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ServerCount {
    /// `ip:port`, as the clients addressed it.
    pub server: String,
    #[serde(rename = "count")]
    pub answered: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InterfaceCount {
    pub ifname: String,
    pub dir: String,
    pub dns_packets: u64,
}

/// A finding's time, as printed (`2025-01-01T12:00:01.123Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub SystemTime);

impl Timestamp {
    /// How long after `earlier` this is; zero if it is not later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        self.0.duration_since(earlier.0).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_rfc3339_millis(&text)
            .map(Timestamp)
            .ok_or_else(|| serde::de::Error::custom(format!("not a UTC RFC 3339 time: {text}")))
    }
}

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

    pub fn loops(&self) -> Vec<&LoopFinding> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Loop(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    /// The loop reports for `qname` (with its trailing dot), in the order they were printed.
    pub fn loops_for(&self, qname: &str) -> Vec<&LoopFinding> {
        self.loops()
            .into_iter()
            .filter(|found| found.qname.eq_ignore_ascii_case(qname))
            .collect()
    }

    pub fn unexpected_sources(&self) -> Vec<&UnexpectedSourceFinding> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::UnexpectedSource(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn timeouts(&self) -> Vec<&TimeoutFinding> {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Timeout(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    pub fn summary(&self) -> &Summary {
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

impl Summary {
    /// DNS packets the kernel counted on `ifname` in direction `dir` (`ingress`, `egress`).
    pub fn dns_packets(&self, ifname: &str, dir: &str) -> u64 {
        self.interfaces
            .iter()
            .filter(|count| count.ifname == ifname && count.dir == dir)
            .map(|count| count.dns_packets)
            .sum()
    }
}

impl LoopFinding {
    /// Whether some hop of the path was seen on interface `ifname`.
    pub fn crosses(&self, ifname: &str) -> bool {
        self.path.iter().any(|hop| hop.ifname == ifname)
    }

    /// Whether some hop of the path left or entered the namespace named `namespace`.
    pub fn passes_through(&self, namespace: &str) -> bool {
        self.path.iter().any(|hop| {
            hop.leaves.as_deref() == Some(namespace) || hop.enters.as_deref() == Some(namespace)
        })
    }

    /// How long after the first packet of its path the loop was reported.
    pub fn reported_after(&self) -> Option<Duration> {
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
    fn reads_every_kind_of_line_and_ignores_unknown_ones() {
        let lines = [
            r#"{"kind":"loop","ts":"2025-01-01T12:00:01.500Z","qname":"www.example.test.","qtype":"A","count":3,"unanswered":0,"path":[{"ts":"2025-01-01T12:00:01.123Z","ifname":"cni0","dir":"ingress","src":"10.244.0.3:40000","dst":"169.254.25.10:53","id":2000}],"servers":["169.254.25.10"],"probe":null,"summary":"loop: ...","dnat":[{"service":"10.96.0.10:53","backend":"10.244.0.3:53"}],"loop_id":"59fb06aa805f4f20","off_node":[{"left_via":"vxlan0","sent_to":"10.244.1.3:53","back_from":"10.244.1.0:48410","back_via":"vxlan0"}],"node":"node-a"}"#,
            r#"{"kind":"unexpected_source","ts":"2025-01-01T12:00:01.123Z","client":"10.244.0.2:41234","expected":"10.96.0.10:53","actual":"10.244.0.3:53","id":4242,"qname":"a.","qtype":"A","conntrack":{"original_dst":"10.96.0.10:53","reply_src":"10.244.0.3:53","unreplied":true},"cause":"bridge-nf-call-iptables=0","summary":"..."}"#,
            r#"{"kind":"timeout","ts":"2025-01-01T12:00:03.000Z","client":"[fd00::2]:5353","server":"10.255.0.99:53","id":1,"count":1,"qname":"a.","qtype":"A","waited_ms":2000,"summary":"...","new_field":1}"#,
            r#"{"kind":"packet","ts":"2025-01-01T12:00:03.000Z","proto":"udp"}"#,
        ];
        let records: Vec<Record> = lines
            .iter()
            .map(|line| serde_json::from_str(line).expect(line))
            .collect();
        let Record::Loop(found) = &records[0] else {
            panic!("{:?}", records[0]);
        };
        assert_eq!(found.reported_after(), Some(Duration::from_millis(377)));
        assert!(found.crosses("cni0") && !found.crosses("lo"));
        let Record::UnexpectedSource(found) = &records[1] else {
            panic!("{:?}", records[1]);
        };
        assert!(found.conntrack.as_ref().is_some_and(|c| c.unreplied));
        assert!(matches!(&records[2], Record::Timeout(t) if t.waited_ms == 2000));
        assert!(matches!(records[3], Record::Other));
    }
}
