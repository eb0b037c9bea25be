//! A CoreDNS-like loop storm across two nodes, and what the tracer on one of them makes of it.
//!
//! The `cluster-loop` lab's caches and CoreDNS pods are dnsdist, which forwards as CoreDNS's
//! `forward` does: a new ID for every query it sends, and no merging of a question already in
//! flight, so a looping question is thousands of new queries a second. A client on node 1 asks
//! its node cache external names; each goes round both nodes' caches and CoreDNS pods, crossing
//! the VXLAN overlay every round, until a dnsdist's query budget runs out (the lab gives each
//! 20,000 forwards, then 50 a second, shared by every name it forwards) and the loops die out: a
//! few seconds of storm, which more names make denser, not longer. How long it lasted is read
//! from the servers' query logs. `dnsloop trace --output json` runs in node 0's namespace, as it
//! would on one node of the cluster.
use std::{
    path::Path,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result};
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario, Server, EXTERNAL_NAME, NODE_LOCAL_DNS},
    tracer::READY_MARKER,
};
use serde_json::Value;

use super::{
    measure::peak_rss,
    process::Process,
    report::{Report, Row},
    REPEATS,
};

/// Distinct external names the client asks at once: each starts a loop of its own.
const NAMES: usize = 4;
/// How long the servers run after the first query: longer than their query budget lets a storm
/// last (about 3 s here), so that the whole storm is measured; stopping them ends whatever is
/// left of it.
const STORM: Duration = Duration::from_secs(6);
/// The tracer's `--report-interval` (its default): the target counts findings per interval.
const REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// After the servers stop, the tracer's `--timeout` (2 s by default) and a second more, so that
/// the queries left in flight have timed out and been counted before the tracer stops.
const SETTLE: Duration = Duration::from_secs(3);
/// The findings the target allows per report interval: "a few dozen".
const FINDINGS_PER_INTERVAL_TARGET: usize = 50;

const TRACER: &str = "dnsloop trace";

/// What one storm measured.
struct StormRun {
    /// DNS packets the programs parsed, per second from the first query to the last query the
    /// servers logged.
    dns_packets_per_second: Option<f64>,
    storm_seconds: f64,
    loops: usize,
    timeouts: usize,
    unexpected_sources: usize,
    /// Findings per second from the first query to the tracer's end (its final reports
    /// included).
    findings_per_second: f64,
    /// The most findings printed within one report interval, counted from the first query.
    most_findings_in_an_interval: usize,
    /// `None` when the summary did not report lost events at all.
    lost_events: Option<f64>,
    peak_rss: u64,
    /// From the first query to the first loop report, and whether that report is of a loop
    /// through other nodes (its `off_node` is not empty).
    first_loop: Option<(Duration, bool)>,
    /// From the first query to the first report of a loop through other nodes.
    first_off_node_loop: Option<Duration>,
}

impl StormRun {
    fn findings(&self) -> usize {
        self.loops + self.timeouts + self.unexpected_sources
    }
}

/// `REPEATS` storms, each on a lab of its own (a storm spends the servers' budget).
pub fn run(dnsloop: &Path, report: &mut Report) -> Result<()> {
    let runs = (0..REPEATS)
        .map(|_| storm(dnsloop))
        .collect::<Result<Vec<_>>>()?;
    let mut add = |section: &str, config: &str, unit: &str, value: fn(&StormRun) -> Option<f64>| {
        let values: Vec<f64> = runs.iter().filter_map(value).collect();
        report.add(Row::new(section, config, &values, unit));
    };
    add(
        "DNS packets/s the programs parsed, cluster loop storm",
        TRACER,
        "pkt/s",
        |run| run.dns_packets_per_second,
    );
    add(
        "storm length (first query to the servers' last), cluster loop storm",
        TRACER,
        "s",
        |run| Some(run.storm_seconds),
    );
    const FINDINGS: &str = "findings per run, cluster loop storm";
    add(FINDINGS, "loop", "", |run| Some(run.loops as f64));
    add(FINDINGS, "timeout", "", |run| Some(run.timeouts as f64));
    add(FINDINGS, "unexpected source", "", |run| {
        Some(run.unexpected_sources as f64)
    });
    add(FINDINGS, "all kinds", "", |run| Some(run.findings() as f64));
    add("findings/s, cluster loop storm", TRACER, "", |run| {
        Some(run.findings_per_second)
    });
    let per_interval = format!(
        "findings per report interval ({} s), cluster loop storm",
        REPORT_INTERVAL.as_secs()
    );
    add(&per_interval, TRACER, "", |run| {
        Some(run.most_findings_in_an_interval as f64)
    });
    add(
        "lost events per run, cluster loop storm",
        TRACER,
        "",
        |run| run.lost_events,
    );
    add(
        "peak userspace memory (VmHWM), cluster loop storm",
        TRACER,
        "MiB",
        |run| Some(run.peak_rss as f64 / 1024.0 / 1024.0),
    );
    add(
        "first query to first loop report, cluster loop storm",
        TRACER,
        "ms",
        |run| Some(run.first_loop?.0.as_secs_f64() * 1000.0),
    );
    add(
        "first query to first report of a loop through other nodes, cluster loop storm",
        TRACER,
        "ms",
        |run| Some(run.first_off_node_loop?.as_secs_f64() * 1000.0),
    );
    let most_per_interval = runs
        .iter()
        .map(|run| run.most_findings_in_an_interval)
        .max()
        .unwrap_or_default();
    let off_node = runs
        .iter()
        .filter(|run| run.first_loop.is_some_and(|(_, off_node)| off_node))
        .count();
    let lost_counted = runs.iter().filter(|run| run.lost_events.is_some()).count();
    let most_memory = runs
        .iter()
        .map(|run| run.peak_rss)
        .max()
        .unwrap_or_default();
    let (storm_seconds, runs_done) = (STORM.as_secs(), runs.len());
    let most_memory_mib = most_memory as f64 / 1024.0 / 1024.0;
    report.note(format!(
        "Cluster loop storm ({runs_done} runs; 2 nodes of dnsdist caches and CoreDNS pods, a new \
         ID per forward, the loop crossing the VXLAN overlay; {NAMES} external names asked on \
         node 1, traced on node 0, the servers stopped {storm_seconds} s after the first query, \
         when the storm has spent their budget): at most {most_per_interval} findings in a \
         report interval (target: a few dozen, <= {FINDINGS_PER_INTERVAL_TARGET}); lost events \
         counted in the summary in {lost_counted} of {runs_done} runs (target: every run); the \
         first loop report was of a loop through other nodes (`off_node`) in {off_node} of \
         {runs_done} runs; peak userspace memory (VmHWM) {most_memory_mib:.1} MiB at most \
         (target <= 64 MiB)."
    ));
    Ok(())
}

fn storm(dnsloop: &Path) -> Result<StormRun> {
    let mut lab = Lab::builder(Scenario::ClusterLoop).nodes(2).start()?;
    let binary = dnsloop.to_str().context("a UTF-8 path")?;
    let interval = format!("{}s", REPORT_INTERVAL.as_secs());
    let child = lab.spawn(
        lab.node_ns_of(0)?,
        &[
            binary,
            "trace",
            "--output",
            "json",
            "--report-interval",
            &interval,
        ],
    )?;
    let tracer = Process::started(child, READY_MARKER)?;
    let pid = tracer.child.id();
    let client = lab.pod_ns_on(1, Pod::Client)?;
    let cache = format!("@{NODE_LOCAL_DNS}");
    let names: Vec<String> = (0..NAMES)
        .map(|number| format!("storm{number}.{EXTERNAL_NAME}"))
        .collect();
    let (first_query, first_query_wall) = (Instant::now(), SystemTime::now());
    // dig waits a second for an answer that never comes; the loop goes on without it.
    let digs = names
        .iter()
        .map(|name| lab.spawn(&client, &["dig", "+tries=1", "+timeout=1", &cache, name]))
        .collect::<Result<Vec<_>>>()?;
    thread::sleep(STORM.saturating_sub(first_query.elapsed()));
    lab.stop_servers();
    let storm_seconds = match last_logged_query(&lab)? {
        Some(last) => last.duration_since(first_query_wall).unwrap_or_default(),
        None => first_query.elapsed(),
    }
    .as_secs_f64();
    for mut dig in digs {
        let _ = dig.wait();
    }
    thread::sleep(SETTLE);
    let peak_rss = peak_rss(pid)?;
    let lines = tracer.interrupt()?;
    let run_seconds = first_query.elapsed().as_secs_f64();
    drop(lab);

    let records: Vec<(Instant, Value)> = lines
        .into_iter()
        .filter_map(|(arrived, line)| Some((arrived, serde_json::from_str(&line).ok()?)))
        .collect();
    let of_kind = |kind: &'static str| {
        records
            .iter()
            .filter(move |(_, value)| value["kind"] == kind)
    };
    let summary = of_kind("summary").next_back().map(|(_, value)| value);
    let finding_times: Vec<Instant> = ["loop", "timeout", "unexpected_source"]
        .iter()
        .flat_map(|kind| of_kind(kind).map(|(arrived, _)| *arrived))
        .collect();
    let mut per_interval = vec![0; (run_seconds / REPORT_INTERVAL.as_secs_f64()).ceil() as usize];
    for arrived in &finding_times {
        let since = arrived.saturating_duration_since(first_query).as_secs_f64();
        let interval = (since / REPORT_INTERVAL.as_secs_f64()) as usize;
        if interval >= per_interval.len() {
            per_interval.resize(interval + 1, 0);
        }
        per_interval[interval] += 1;
    }
    let through_other_nodes = |value: &Value| {
        value["off_node"]
            .as_array()
            .is_some_and(|hops| !hops.is_empty())
    };
    let first_loop = of_kind("loop").next().map(|(arrived, value)| {
        (
            arrived.saturating_duration_since(first_query),
            through_other_nodes(value),
        )
    });
    let first_off_node_loop = of_kind("loop")
        .find(|(_, value)| through_other_nodes(value))
        .map(|(arrived, _)| arrived.saturating_duration_since(first_query));
    Ok(StormRun {
        dns_packets_per_second: summary
            .and_then(|summary| summary["kernel"]["dns_packets"].as_f64())
            .map(|packets| packets / storm_seconds),
        storm_seconds,
        loops: of_kind("loop").count(),
        timeouts: of_kind("timeout").count(),
        unexpected_sources: of_kind("unexpected_source").count(),
        findings_per_second: finding_times.len() as f64 / run_seconds,
        most_findings_in_an_interval: per_interval.into_iter().max().unwrap_or_default(),
        lost_events: summary.and_then(|summary| summary["lost_events"].as_f64()),
        peak_rss,
        first_loop,
        first_off_node_loop,
    })
}

/// When the last query any of the lab's DNS servers received arrived: each logs every query as
/// `[SECONDS.FRACTION] Packet from ...` (dnsdist's LogAction, with its time since the epoch).
fn last_logged_query(lab: &Lab) -> Result<Option<SystemTime>> {
    let mut last: Option<SystemTime> = None;
    for node in 0..lab.nodes() {
        for server in [Server::NodeCache, Server::CoreDnsA] {
            let log = lab.server_log_on(node, server)?;
            let logged = log.lines().filter_map(|line| {
                let seconds: f64 = line.strip_prefix('[')?.split_once(']')?.0.parse().ok()?;
                Some(UNIX_EPOCH + Duration::from_secs_f64(seconds))
            });
            last = last.into_iter().chain(logged).max();
        }
    }
    Ok(last)
}
