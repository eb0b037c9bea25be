//! `dnsloop trace --record DIR`, the flight recorder, on a looping lab: the loop's finding is
//! printed with the path of a bundle, which holds the loop from the client's very first query
//! on, names the loop in its report, and analyzes to the loop live tracing reported; the same
//! loop seen again within `--record-interval` gets no second bundle. What it writes is its
//! owner's alone, even under a umask of 0000, and it refuses a directory others can write.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::Duration,
};

use dnsloop_core::schema::{BundleRecord, CaptureReport, Record};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::{fqdn, loop_as_seen, Trace},
    lab::{Lab, Pod, Scenario, EXTERNAL_NAME, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};

/// How long the loop goes on after the client's query: past the bundle's end (`--record-after`
/// 2s), with the loop reported again every second (`--report-interval`).
const LOOPING_FOR: Duration = Duration::from_secs(5);

/// The `dns.id` of each query (not reply) from `client` in `file`, in file order, as tshark
/// reads them.
fn query_ids_from(file: &Path, client: &str) -> Vec<String> {
    let output = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args([
            "-Y",
            &format!("ip.src == {client} && dns.flags.response == 0"),
            "-T",
            "fields",
            "-e",
            "dns.id",
        ])
        .output()
        .expect("running tshark");
    assert!(
        output.status.success(),
        "tshark reads {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn directories(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("the record directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.is_dir())
        .collect();
    found.sort();
    found
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .or_fail(format_args!("{}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every directory under `dir`, itself included, is 0700 and every file 0600.
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for entry in fs::read_dir(dir).or_fail(format_args!("{}", dir.display())) {
        let path = entry.or_fail("an entry").path();
        if path.is_dir() {
            assert_private(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}

#[test]
fn a_directory_others_can_write_is_refused_for_recording() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let shared = scratch.path().join("shared");
    fs::create_dir(&shared).expect("a directory");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).expect("chmod 1777");
    let output = Command::new(dnsloop_bin())
        .args(["trace", "--duration", "1s", "--record"])
        .arg(&shared)
        .output()
        .expect("running dnsloop");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "refused: {stderr}");
    assert!(
        stderr.contains("can be written by any user of the node (mode 1777)")
            && stderr.contains("chmod o-w"),
        "says why and what to do: {stderr}"
    );
    assert_eq!(
        fs::read_dir(&shared).expect("the directory").count(),
        0,
        "nothing written there"
    );
}

#[test]
fn a_loop_is_recorded_once_from_the_clients_first_query_and_analyzes_to_the_same_loop() {
    let test = test_name!();
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tshark"), Need::DnsloopBinary],
    ) {
        return;
    }
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let record_dir = scratch.path().join("record");
    let lab = Lab::builder(Scenario::NodelocalLoop).start().or_fail(test);
    // What the client sent, as its own pod saw it: the first query is the loop's first packet.
    let client_file = scratch.path().join("client.pcap");
    let client_capture = lab
        .capture_pcap(&lab.pod_ns(Pod::Client), "any", "udp port 53", &client_file)
        .or_fail(test);
    // Under a umask that takes nothing away: the recording is private all the same.
    let trace = Tracer::start_with_umask(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &[
            "--output",
            "json",
            "--report-interval",
            "1s",
            "--record",
            record_dir.to_str().expect("a UTF-8 path"),
            "--record-after",
            "2s",
        ],
        0o000,
    )
    .or_fail(test);
    lab.dig(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[EXTERNAL_NAME])
        .or_fail(test);
    thread::sleep(LOOPING_FOR);
    let output = trace.interrupt().or_fail(test);
    client_capture.stop().or_fail(test);
    let live = Trace::from_output(output).or_fail(test);
    let qname = fqdn(EXTERNAL_NAME);

    // The loop, reported live, again and again: a bundle line follows its first report only.
    // (Another finding, such as a drop, may have started the bundle the loop joins, or one of
    // its own.)
    let live_loops = live.loops_for(&qname);
    assert!(
        live_loops.len() >= 2,
        "the loop is reported, then again within --record-interval:\n{live}"
    );
    let bundles: Vec<(usize, &BundleRecord)> = live
        .records
        .iter()
        .enumerate()
        .filter_map(|(at, record)| match record {
            Record::Bundle(bundle) => Some((at, bundle)),
            _ => None,
        })
        .collect();
    let of_the_loop: Vec<&(usize, &BundleRecord)> = bundles
        .iter()
        .filter(|(_, bundle)| bundle.loop_id.is_some())
        .collect();
    let [&(at, bundle)] = of_the_loop[..] else {
        panic!("one bundle line for the loop:\n{live}");
    };
    let Record::Loop(found) = &live.records[at - 1] else {
        panic!("the bundle line follows its finding:\n{live}");
    };
    assert_eq!(found, live_loops[0], "the first report of the loop");
    assert_eq!(
        (bundle.finding.as_str(), bundle.loop_id.as_ref()),
        ("loop", Some(&found.loop_id))
    );
    assert_eq!(bundle.suppressed, 0);

    // A bundle on disk for each one started, the loop's where its line says, written before
    // the trace ended.
    let path = PathBuf::from(&bundle.path);
    let mut started: Vec<PathBuf> = bundles
        .iter()
        .filter(|(_, bundle)| bundle.started)
        .map(|(_, bundle)| PathBuf::from(&bundle.path))
        .collect();
    started.sort();
    assert_eq!(directories(&record_dir), started, "{}", live.stderr);
    assert!(started.contains(&path), "{live}");
    // Every pod's DNS is in there: the node's other users read none of it, whatever the umask.
    assert_private(&record_dir);
    assert!(
        live.stderr
            .contains(&format!("bundle written to {}", path.display())),
        "{}",
        live.stderr
    );
    assert!(
        !live.stderr.contains(" 0 got none"),
        "the loop's repeats within the interval are counted:\n{}",
        live.stderr
    );

    // Its report names the loop.
    let report: CaptureReport =
        serde_json::from_slice(&fs::read(path.join("report.json")).expect("report.json"))
            .expect("report.json is a capture report");
    let recorded = report.recorded.as_ref().expect("made by --record");
    if bundle.started {
        assert_eq!(
            (recorded.finding.as_str(), recorded.loop_id.as_ref()),
            ("loop", Some(&found.loop_id))
        );
    }
    assert!(recorded.complete, "{report:#?}");
    assert!(
        report
            .findings
            .iter()
            .any(|record| matches!(record, Record::Loop(reported) if reported == found)),
        "report.json holds the loop as trace printed it: {:#?}",
        report.findings
    );

    // Its packets start with the client's very first query of the loop.
    let pcapng = path.join("capture.pcapng");
    let client = Pod::Client.ip().to_string();
    let sent = query_ids_from(&client_file, &client);
    let recorded_queries = query_ids_from(&pcapng, &client);
    assert!(!sent.is_empty(), "the client's capture holds its query");
    assert_eq!(
        recorded_queries.first(),
        sent.first(),
        "the bundle holds the client's first query:\nsent {sent:?}\nrecorded {recorded_queries:?}"
    );
    assert!(
        report
            .pcapng
            .as_ref()
            .is_some_and(|file| file.commented > 0),
        "the loop's hops carry its comment"
    );

    // Offline, the bundle (its directory given) tells of the same loop, first report for first
    // report.
    let offline = tracer::analyze(&dnsloop_bin(), &path, &[])
        .and_then(Trace::from_output)
        .or_fail(format_args!("dnsloop analyze {}", path.display()));
    assert!(
        offline.stdout.contains("capture.pcapng"),
        "the bundle's packet file is what was read:\n{offline}"
    );
    let analysed = offline.loops_for(&qname);
    assert!(!analysed.is_empty(), "analyze finds the loop:\n{offline}");
    assert_eq!(
        loop_as_seen(analysed[0]),
        loop_as_seen(found),
        "analyze and trace disagree:\n--- trace ---\n{live}\n--- analyze ---\n{offline}"
    );
}
