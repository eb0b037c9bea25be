//! `dnsloop capture` leaves a bundle that stands on its own: tshark reads its packets, its
//! reports name the fault, and `dnsloop analyze` finds in it exactly what the capture reported
//! live. A size limit is kept and said, and Ctrl-C still leaves a whole bundle.
use std::{path::Path, process::Command};

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::{loop_as_seen, Trace},
    lab::{Lab, Pod, Scenario, EXTERNAL_NAME, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};
use serde_json::Value;

/// What one capture left: its own output, and its bundle's directory (removed with it).
struct Captured {
    live: Trace,
    bundle: tempfile::TempDir,
}

/// Runs `dnsloop capture --output json --out DIR OPTIONS` on the node of a `nodelocal-loop`
/// lab while the client's question loops, and stops it with Ctrl-C.
fn capture_the_loop(test: &str, options: &[&str]) -> Option<Captured> {
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tshark"), Need::DnsloopBinary],
    ) {
        return None;
    }
    let bundle = tempfile::tempdir().expect("a temporary directory");
    let out = bundle.path().join("bundle");
    let lab = Lab::builder(Scenario::NodelocalLoop).start().or_fail(test);
    let mut args = vec![
        "--output",
        "json",
        "--duration",
        "1h",
        "--out",
        out.to_str().expect("a UTF-8 path"),
    ];
    args.extend(options);
    let capture = Tracer::start_subcommand(&dnsloop_bin(), "capture", &lab, lab.node_ns(), &args)
        .or_fail(test);
    lab.dig(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[EXTERNAL_NAME])
        .or_fail(test);
    // Ctrl-C long before the hour is up: the bundle is written all the same.
    let output = capture.interrupt().or_fail(test);
    assert!(
        output.stderr.contains("bundle written to"),
        "the capture says where its bundle is:\n{}",
        output.stderr
    );
    let live = Trace::from_output(output).or_fail(test);
    Some(Captured { live, bundle })
}

fn bundle_file(captured: &Captured, name: &str) -> std::path::PathBuf {
    captured.bundle.path().join("bundle").join(name)
}

/// `dnsloop analyze --output json FILE`.
fn analyze(file: &Path) -> Trace {
    tracer::analyze(&dnsloop_bin(), file, &[])
        .and_then(Trace::from_output)
        .or_fail(format_args!("dnsloop analyze {}", file.display()))
}

#[test]
fn a_capture_of_a_loop_reads_in_tshark_names_the_loop_and_analyzes_to_the_same_findings() {
    let Some(captured) = capture_the_loop(test_name!(), &[]) else {
        return;
    };
    let qname = format!("{EXTERNAL_NAME}.");
    let live_loops = captured.live.loops_for(&qname);
    assert!(
        !live_loops.is_empty(),
        "the loop is reported live:\n{}",
        captured.live
    );

    // tshark decodes the DNS of every packet, and finds the loop's comments.
    let pcapng = bundle_file(&captured, "capture.pcapng");
    let tshark = |filter: &str| -> Vec<String> {
        let output = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(&pcapng)
            .args(["-Y", filter, "-T", "fields", "-e", "dns.qry.name"])
            .output()
            .expect("running tshark");
        assert!(output.status.success(), "tshark reads the file");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let dns = tshark("dns");
    assert!(
        dns.len() > 10,
        "the loop's packets are in the file: {}",
        dns.len()
    );
    assert!(dns.iter().all(|name| name == EXTERNAL_NAME), "{dns:?}");
    let commented = tshark(&format!("frame.comment == \"loop {qname}\""));
    assert!(!commented.is_empty(), "the loop's hops carry its comment");

    // The reports name the loop, findings first.
    let report: Value = serde_json::from_slice(
        &std::fs::read(bundle_file(&captured, "report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    let findings = report["findings"].as_array().expect("findings");
    assert!(
        findings
            .iter()
            .any(|found| found["kind"] == "loop" && found["qname"] == qname.as_str()),
        "{report:#}"
    );
    assert_eq!(report["summary"]["kind"], "summary");
    assert!(
        report["pcapng"]["packets"].as_u64() > Some(10),
        "{report:#}"
    );
    assert!(
        report["node"]["resolv_conf"]["content"].is_string(),
        "{report:#}"
    );
    assert!(report["node"]["checks"]
        .as_array()
        .is_some_and(|checks| !checks.is_empty()));
    let markdown = std::fs::read_to_string(bundle_file(&captured, "report.md")).expect("report.md");
    let findings_at = markdown.find("## Findings").expect("a findings section");
    let loop_at = markdown.find("LOOP").expect("the loop in report.md");
    assert!(findings_at < loop_at && loop_at < markdown.find("## Packets").unwrap_or(0));

    // The same packets, analysed offline: the same loop reports, hop for hop.
    let offline = analyze(&pcapng);
    let live: Vec<_> = live_loops.iter().copied().map(loop_as_seen).collect();
    let analysed: Vec<_> = offline
        .loops_for(&qname)
        .into_iter()
        .map(loop_as_seen)
        .collect();
    assert_eq!(
        analysed, live,
        "analyze and capture disagree:\n--- live ---\n{}\n--- analyze ---\n{offline}",
        captured.live
    );
    assert_eq!(
        offline.unexpected_sources().len(),
        captured.live.unexpected_sources().len()
    );
    assert_eq!(offline.timeouts().len(), captured.live.timeouts().len());
}

#[test]
fn a_capture_keeps_to_its_size_limit_and_says_so() {
    const LIMIT: u64 = 20_000;
    let limit = LIMIT.to_string();
    let Some(captured) = capture_the_loop(test_name!(), &["--max-bytes", &limit]) else {
        return;
    };
    let pcapng = bundle_file(&captured, "capture.pcapng");
    let size = std::fs::metadata(&pcapng).expect("the packet file").len();
    assert!(size <= LIMIT, "{size} bytes");
    let report: Value = serde_json::from_slice(
        &std::fs::read(bundle_file(&captured, "report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    assert!(
        report["pcapng"]["left_out"].as_u64() > Some(0),
        "{report:#}"
    );
    let note = report["pcapng"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("limit"), "{report:#}");
    let markdown = std::fs::read_to_string(bundle_file(&captured, "report.md")).expect("report.md");
    assert!(markdown.contains("**Note:**"), "{markdown}");
    // What was written is still a file tshark reads.
    let status = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&pcapng)
        .output()
        .expect("running tshark")
        .status;
    assert!(status.success());
}
