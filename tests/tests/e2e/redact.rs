//! `--redact-names KEY_FILE`: `trace`, `analyze` and `capture` write every queried name as a
//! keyed hash of its labels, in everything they write (stdout, stderr, bundles), and find what
//! they find without it: a loop through two nodes keeps one `loop_id` on both. The names
//! looked for are those the scenario's servers are configured with ([`Scenario::dns_names`]).
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use dnsloop_core::{
    bundle::{JSON_REPORT, MARKDOWN_REPORT, PCAPNG_FILE},
    finding::LoopId,
    present::names::{Names, Redaction},
    schema::{CaptureReport, Record},
};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::Trace,
    lab::{dead_stub_domains, Lab, Pod, Scenario, CLUSTER_RECORDS, EXTERNAL_NAME, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};

use super::cluster::{loop_through_two_nodes_traced, UDP_STORM};

/// Every node's key: the same bytes, so the same hashes.
const KEY: &[u8] = b"the lab's redaction key: 32 byte";

/// Long enough for a query to the dead stub domain to time out and be reported.
const TIMEOUT_REPORTED_WITHIN: Duration = Duration::from_secs(10);

/// Writes the key to `dir/key`, readable by its owner alone.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("key");
    fs::write(&path, KEY).expect("writing the key");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod 600");
    path
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// `name` as dnsloop writes it with [`KEY`], trailing dot included.
fn redacted(name: &str) -> String {
    let redaction = Redaction::new(KEY, "cluster.local").expect("a key long enough");
    let mut text = String::new();
    Names::redacted(redaction).write(
        name.trim_end_matches('.').split('.').map(str::as_bytes),
        &mut text,
    );
    text
}

/// What redacted output must not hold, in any case: each of the scenario's names from every
/// label the redaction hashes on (`www.example.test` and `example.test`; not `test`, nor
/// `default.svc.cluster.local`, which stay readable).
fn lab_names(scenario: Scenario) -> Vec<String> {
    let mut names = Vec::new();
    for name in scenario.dns_names() {
        let labels: Vec<&str> = name.split('.').collect();
        let shown = redacted(name);
        for (at, label) in shown.trim_end_matches('.').split('.').enumerate() {
            if label.starts_with("h:") {
                names.push(labels[at..].join(".").to_ascii_lowercase());
            }
        }
    }
    assert!(
        names.iter().any(|name| name.contains(EXTERNAL_NAME)),
        "{names:?}"
    );
    names
}

/// Fails if `text` holds a name of the lab.
fn assert_no_lab_name(names: &[String], context: &str, text: &str) {
    let lower = text.to_ascii_lowercase();
    for name in names {
        assert!(
            !lower.contains(name.as_str()),
            "{context} names {name}:\n{text}"
        );
    }
}

/// The bundles under `dir` (`trace --record`'s), or `dir` itself if it is one.
fn bundles(dir: &Path) -> Vec<PathBuf> {
    if dir.join(JSON_REPORT).exists() {
        return vec![dir.to_path_buf()];
    }
    let mut bundles: Vec<PathBuf> = fs::read_dir(dir)
        .or_fail(format_args!("reading {}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_dir())
        .collect();
    bundles.sort();
    bundles
}

/// Checks a bundle written with names redacted: no packet file, reports that say why, and no
/// name of the lab in any of its files. The node's DNS configuration (resolv.conf, doctor's
/// checks of it) is the node's, not a query's, and is kept as it is: left out of the check.
fn assert_redacted_bundle(names: &[String], bundle: &Path) {
    assert!(
        !bundle.join(PCAPNG_FILE).exists(),
        "{}: the packets carry the names",
        bundle.display()
    );
    let json = fs::read(bundle.join(JSON_REPORT)).or_fail("report.json");
    let report: CaptureReport = serde_json::from_slice(&json).or_fail("a capture report");
    assert!(
        report.names_redacted && report.pcapng.is_none(),
        "{report:#?}"
    );
    let markdown = fs::read_to_string(bundle.join(MARKDOWN_REPORT)).or_fail("report.md");
    assert!(markdown.contains("is left out"), "{markdown}");
    for entry in fs::read_dir(bundle).or_fail("reading the bundle") {
        let path = entry.expect("a directory entry").path();
        let text = String::from_utf8_lossy(&fs::read(&path).or_fail("reading a file")).into_owned();
        let text = match path.file_name().and_then(|name| name.to_str()) {
            Some(JSON_REPORT) => {
                let mut value: serde_json::Value = serde_json::from_str(&text).or_fail("JSON");
                value["node"] = serde_json::Value::Null;
                value.to_string()
            }
            Some(MARKDOWN_REPORT) => text
                .split("## The node's DNS configuration")
                .next()
                .unwrap_or_default()
                .to_owned(),
            _ => text,
        };
        assert_no_lab_name(names, &path.display().to_string(), &text);
    }
}

/// `name` in wire format, lower case: what `loop_id` hashes.
fn folded_wire(name: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    for label in name.trim_end_matches('.').split('.') {
        wire.push(u8::try_from(label.len()).expect("a label"));
        wire.extend(label.to_ascii_lowercase().bytes());
    }
    wire.push(0);
    wire
}

#[test]
fn a_redacted_loop_through_two_nodes_keeps_one_loop_id_and_names_nothing() {
    let test = test_name!();
    let scenario = Scenario::ClusterLoop;
    let files = tempfile::tempdir().expect("a temporary directory");
    let key = key_file(files.path());
    let record_dir = |node: usize| files.path().join(format!("record-node{node}"));
    let qname = redacted(EXTERNAL_NAME);
    let Some(traces) = loop_through_two_nodes_traced(
        test,
        scenario,
        UDP_STORM,
        |node| {
            [
                "--redact-names",
                path_str(&key),
                "--record",
                path_str(&record_dir(node)),
            ]
            .map(str::to_owned)
            .to_vec()
        },
        &qname,
    ) else {
        return;
    };
    // One id on both nodes, keyed like the names: not the plain hash of the question (A,
    // class IN), against which a guessed name could be checked.
    let plain_id = LoopId::of(&folded_wire(EXTERNAL_NAME), 1, 1).to_string();
    let loop_id = traces[0]
        .loops_for(&qname)
        .first()
        .map(|found| found.loop_id.clone())
        .or_fail(format_args!("node 0 reported the loop of {qname}"));
    assert_ne!(loop_id, plain_id, "the loop_id is keyed");
    let names = lab_names(scenario);
    for (node, trace) in traces.iter().enumerate() {
        let loops = trace.loops_for(&qname);
        assert!(
            loops.iter().all(|found| found.loop_id == loop_id),
            "node {node}: the loop_id of {EXTERNAL_NAME} A is not node 0's {loop_id}:\n{}",
            trace.stdout
        );
        assert_no_lab_name(&names, &format!("node {node}'s stdout"), &trace.stdout);
        assert_no_lab_name(&names, &format!("node {node}'s stderr"), &trace.stderr);
        let bundles = bundles(&record_dir(node));
        assert!(!bundles.is_empty(), "node {node} recorded the loop");
        for bundle in bundles {
            assert_redacted_bundle(&names, &bundle);
        }
    }
}

/// `dnsloop analyze ARGS FILE` with text output.
fn analyze_text(file: &Path, args: &[&str]) -> String {
    let output = Command::new(dnsloop_bin())
        .arg("analyze")
        .args(args)
        .arg(file)
        .output()
        .or_fail("running dnsloop analyze");
    assert!(output.status.success(), "{output:?}");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn packet_lines_findings_and_analyze_of_a_capture_name_nothing_when_redacted() {
    let test = test_name!();
    let scenario = Scenario::DeadUpstream;
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tcpdump"), Need::DnsloopBinary],
    ) {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let key = key_file(files.path());
    let redact = ["--redact-names", path_str(&key)];
    let pcap = files.path().join("node-any.pcap");
    let lab = Lab::builder(scenario).start().or_fail(test);
    let capture = lab
        .capture_pcap(lab.node_ns(), "any", "port 53 or icmp or icmp6", &pcap)
        .or_fail(test);
    // Every lookup answered is slow enough to be reported.
    let mut args = vec!["--output", "json", "--packets", "--slow", "0s"];
    args.extend(redact);
    let mut tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &args).or_fail(test);
    let node_cache = NODE_LOCAL_DNS.to_string();
    // An external name, the cluster's own, one through the search list, and a stub domain
    // whose server never answers.
    lab.dig(Pod::Client, &node_cache, &[EXTERNAL_NAME])
        .or_fail(test);
    for (name, _) in CLUSTER_RECORDS {
        lab.dig(Pod::Client, &node_cache, &[name]).or_fail(test);
    }
    let _ = lab.getent_as_a_pod(Pod::Client, EXTERNAL_NAME);
    let (stub, _, _) = dead_stub_domains()[0];
    let lost = format!("db.{stub}");
    let _ = lab.dig(Pod::Client, &node_cache, &[&lost]);
    let timed_out = redacted(&lost);
    tracer
        .wait_for_record(
            TIMEOUT_REPORTED_WITHIN,
            |record| matches!(record, Record::Timeout(found) if found.qname == timed_out),
        )
        .or_fail(format_args!("{test}: the timeout of {lost}, redacted"));
    let trace = Trace::from_output(tracer.interrupt().or_fail(test)).or_fail(test);
    capture.stop_complete().or_fail(test);

    let names = lab_names(scenario);
    let redacted_packets = trace
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Packet(packet) => packet.qname.as_deref(),
            _ => None,
        })
        .filter(|qname| qname.starts_with("h:"))
        .count();
    assert!(
        redacted_packets > 0,
        "packet lines, names redacted:\n{trace}"
    );
    assert!(
        trace
            .records
            .iter()
            .any(|record| matches!(record, Record::Lookup(_))),
        "slow lookups, names redacted:\n{trace}"
    );
    assert_no_lab_name(&names, "trace's stdout", &trace.stdout);
    assert_no_lab_name(&names, "trace's stderr", &trace.stderr);

    // The capture, analysed elsewhere with the same key (and the node's interface names): the
    // same timeout, and no name.
    let ip_link = lab
        .exec(lab.node_ns(), &["ip", "-o", "link"])
        .or_fail("ip -o link");
    let links = files.path().join("node.links");
    fs::write(&links, &ip_link.stdout).expect("writing the interface names");
    let mut args = vec!["--packets", "--links", path_str(&links)];
    args.extend(redact);
    let analysed = tracer::analyze(&dnsloop_bin(), &pcap, &args)
        .and_then(Trace::from_output)
        .or_fail(format_args!("{test}: dnsloop analyze"));
    // The capture ends before the timeout: the unanswered question is found all the same
    // (what as depends on how much of it the capture shows), its name redacted alike.
    let findings_of_it = analysed
        .records
        .iter()
        .filter(|record| !matches!(record, Record::Packet(_) | Record::Summary(_)))
        .filter(|record| {
            serde_json::to_string(record)
                .expect("a record serializes")
                .contains(&timed_out)
        })
        .count();
    assert!(
        findings_of_it > 0,
        "analyze reports {timed_out} as trace did:\n{analysed}"
    );
    assert_no_lab_name(&names, "analyze --output json", &analysed.stdout);
    assert_no_lab_name(&names, "analyze's stderr", &analysed.stderr);
    let text = analyze_text(&pcap, &args);
    assert!(
        text.contains(&timed_out),
        "analyze names {timed_out} alike:\n{text}"
    );
    assert_no_lab_name(&names, "analyze --output text", &text);
}

#[test]
fn a_redacted_capture_bundle_holds_the_reports_without_packets_or_names() {
    let test = test_name!();
    let scenario = Scenario::NodelocalLoop;
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let key = key_file(files.path());
    let out = files.path().join("bundle");
    let lab = Lab::builder(scenario).start().or_fail(test);
    let args = [
        "--output",
        "json",
        "--duration",
        "1h",
        "--out",
        path_str(&out),
        "--redact-names",
        path_str(&key),
    ];
    let mut capture =
        Tracer::start_subcommand(&dnsloop_bin(), "capture", &lab, lab.node_ns(), &args)
            .or_fail(test);
    let _ = lab.dig(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[EXTERNAL_NAME]);
    let qname = redacted(EXTERNAL_NAME);
    capture
        .wait_for_record(
            Duration::from_secs(5),
            |record| matches!(record, Record::Loop(found) if found.qname == qname),
        )
        .or_fail(format_args!("{test}: the loop of {qname}"));
    let output = capture.interrupt().or_fail(test);
    assert!(
        output.stderr.contains("left out"),
        "the capture says its packets were left out:\n{}",
        output.stderr
    );
    let names = lab_names(scenario);
    assert_no_lab_name(&names, "capture's stdout", &output.stdout);
    assert_no_lab_name(&names, "capture's stderr", &output.stderr);
    assert_redacted_bundle(&names, &out);
    // Nothing to analyse, and analyze says why.
    let refused = tracer::analyze(&dnsloop_bin(), &out, &[]).or_fail("dnsloop analyze");
    assert!(
        !refused.status.success() && refused.stderr.contains("--redact-names"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_key_others_can_read_or_too_short_is_refused_before_anything_runs() {
    if !can_run(test_name!(), &[Need::DnsloopBinary]) {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let readable = files.path().join("readable");
    fs::write(&readable, KEY).expect("writing the key");
    fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).expect("chmod 644");
    let short = files.path().join("short");
    fs::write(&short, b"secret\n").expect("writing the key");
    fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let capture = files.path().join("none.pcap");
    for (key, expected) in [(&readable, "chmod 600"), (&short, "at least 16")] {
        for command in [
            &["trace", "--duration", "1s"][..],
            &[
                "capture",
                "--duration",
                "1s",
                "--out",
                path_str(&files.path().join("out")),
            ],
            &["analyze", path_str(&capture)],
        ] {
            let output = Command::new(dnsloop_bin())
                .args(command)
                .args(["--redact-names", path_str(key)])
                .output()
                .or_fail("running dnsloop");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !output.status.success() && stderr.contains(expected),
                "{command:?} with {}: {stderr}",
                key.display()
            );
        }
    }
    assert!(
        !files.path().join("out").exists(),
        "capture refused before it made its bundle's directory"
    );
}
