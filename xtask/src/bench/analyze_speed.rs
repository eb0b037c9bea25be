//! How fast `dnsloop analyze` reads a capture (issue 33: at least 500,000 packets a second),
//! beside tshark, the reference decoder: the fixed load's `tcpdump -i any -w` file, every hop of
//! every query on a node, read `REPEATS` times by each, in turns.
use std::{
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{ensure, Context as _, Result};
use serde_json::Value;

use super::{
    report::{Report, Row},
    watcher::tcpdump_file,
    Context, REPEATS,
};

pub const ANALYZE_SPEED_SECTION: &str = "capture packets read per second";
pub const ANALYZE: &str = "dnsloop analyze --output json FILE";
pub const TSHARK: &str = "tshark -r FILE -Y dns";

/// Reads the bridged node's capture of the fixed load with each, `REPEATS` times.
pub fn run(context: &Context, report: &mut Report) -> Result<()> {
    let lab = context.lab;
    let capture = tcpdump_file(lab, lab.node_ns_of(0)?);
    ensure!(
        capture.is_file(),
        "{} is missing: the fixed load's tcpdump run writes it",
        capture.display()
    );
    let packets = packets_in(context.dnsloop, &capture)?;
    eprintln!("bench: analyze and tshark reading {packets} packets ({REPEATS} runs each)");
    let mut analyze = Vec::new();
    let mut tshark = Vec::new();
    for _ in 0..REPEATS {
        let mut dnsloop = Command::new(context.dnsloop);
        dnsloop.args(["analyze", "--output", "json"]).arg(&capture);
        analyze.push(packets as f64 / seconds_to_run(&mut dnsloop)?);
        let mut reference = Command::new("tshark");
        reference.arg("-r").arg(&capture).args(["-Y", "dns"]);
        tshark.push(packets as f64 / seconds_to_run(&mut reference)?);
    }
    report.add(Row::new(ANALYZE_SPEED_SECTION, ANALYZE, &analyze, "pkt/s"));
    report.add(Row::new(ANALYZE_SPEED_SECTION, TSHARK, &tshark, "pkt/s"));
    Ok(())
}

/// The packets `capture` holds, as `analyze`'s summary counts them.
fn packets_in(dnsloop: &Path, capture: &Path) -> Result<u64> {
    let output = Command::new(dnsloop)
        .args(["analyze", "--output", "json"])
        .arg(capture)
        .output()
        .context("running dnsloop analyze")?;
    ensure!(output.status.success(), "dnsloop analyze failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|record| record["kind"] == "summary")
        .and_then(|summary| summary["packets"]["read"].as_u64())
        .context("analyze printed no summary with the packets read")
}

/// How long `command` takes to run to its end, its output thrown away.
fn seconds_to_run(command: &mut Command) -> Result<f64> {
    let started = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(status.success(), "{command:?} failed: {status}");
    Ok(started.elapsed().as_secs_f64())
}
