//! A loop storm on one node: CoreDNS probes into the node-local cache's loop, how soon each is
//! reported, what was lost, and the tracer's peak memory.
use std::{
    path::Path,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result};
use dnsloop_tests::{
    findings::parse_rfc3339_millis,
    lab::{Lab, Pod, Scenario},
    tracer::READY_MARKER,
};
use serde_json::Value;

use super::{
    measure::peak_rss,
    process::Process,
    report::{Report, Row},
    watcher::Watcher,
};

/// Loop probes sent into the storm, and how far apart.
pub const PROBES: usize = 20;
/// How soon each probe was reported, its target's row.
pub const LOOP_REPORTED_SECTION: &str = "loop reported after its first packet";
const PROBE_SPACING: Duration = Duration::from_millis(500);

pub fn run(dnsloop: &Path, report: &mut Report) -> Result<()> {
    let lab = Lab::builder(Scenario::NodelocalLoop).start()?;
    let binary = dnsloop.to_str().context("a UTF-8 path")?;
    let child = lab.spawn(lab.node_ns(), &[binary, "trace", "--output", "json"])?;
    let tracer = Process::started(child, READY_MARKER)?;
    let pid = tracer.child.id();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut probes = Vec::new();
    let mut digs = Vec::new();
    for number in 0..PROBES {
        let name = format!("{}.{number}.", seed % 1_000_000_007);
        digs.push(lab.spawn(
            &lab.pod_ns(Pod::CoreDnsA),
            &[
                "dig",
                "+tries=1",
                "+timeout=1",
                "@169.254.25.10",
                "HINFO",
                &name,
            ],
        )?);
        probes.push(name);
        thread::sleep(PROBE_SPACING);
    }
    thread::sleep(Duration::from_secs(2));
    for mut dig in digs {
        let _ = dig.wait();
    }
    let peak = peak_rss(pid)?;
    // Arrival times are Instants; the findings' hop times are wall clock: one anchor joins them.
    let (anchor_instant, anchor_wall) = (Instant::now(), SystemTime::now());
    let lines = tracer.interrupt()?;
    let mut latencies = Vec::new();
    let mut lost = None;
    for probe in &probes {
        let first = lines.iter().find_map(|(arrived, line)| {
            let value: Value = serde_json::from_str(line).ok()?;
            (value["kind"] == "loop" && value["qname"] == probe.as_str())
                .then_some((*arrived, value))
        });
        let Some((arrived, found)) = first else {
            continue;
        };
        let first_hop = found["path"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|hop| parse_rfc3339_millis(hop["ts"].as_str()?))
            .min();
        let arrived_wall = anchor_wall - anchor_instant.saturating_duration_since(arrived);
        if let Some(first_hop) = first_hop {
            let waited = arrived_wall.duration_since(first_hop).unwrap_or_default();
            latencies.push(waited.as_secs_f64() * 1000.0);
        }
    }
    for (_, line) in &lines {
        if let Ok(value) = serde_json::from_str::<Value>(line) {
            if value["kind"] == "summary" {
                lost = value["lost_events"].as_f64();
            }
        }
    }
    report.add(Row::new(
        LOOP_REPORTED_SECTION,
        Watcher::Dnsloop.name(),
        &latencies,
        "ms",
    ));
    report.note(format!(
        "Loop storm: {} of {PROBES} CoreDNS probes reported as loops; {} lost events; peak \
         userspace memory (VmHWM) {:.1} MiB.",
        latencies.len(),
        lost.map_or("unknown".into(), |lost| format!("{lost:.0}")),
        peak as f64 / 1024.0 / 1024.0
    ));
    Ok(())
}
