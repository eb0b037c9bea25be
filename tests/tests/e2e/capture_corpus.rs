//! `analyze` reads what tshark reads. A corpus of captures that are hard to read right (DNS over
//! TCP cut every way, fragmented datagrams, every link layer tcpdump and dumpcap write,
//! nanosecond timestamps, pcapng with several interfaces and snap-length cuts, VXLAN and
//! Geneve, malformed records) is decoded by both; dnsloop must name at least 99 % of the
//! messages tshark names, and none that tshark does not. So must captures of real tools: dig
//! and kdig over UDP with fragmented replies, and over TCP, pipelined and kept open.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use dnsloop_core::schema::SummarySource;
use dnsloop_tests::{
    findings::Trace,
    lab::{Lab, Pod, Scenario},
    or_fail::OrFail as _,
    packet_lines::packet_lines,
    privilege::{can_run, dnsloop_bin, Need},
    test_name, tracer,
    tshark::{tshark_messages, MessageKey},
};

/// How tshark is asked to read: reassembling TCP segments that arrive out of order (which it
/// does not by default), and VXLAN on Linux's port as well as IANA's.
const TSHARK_OPTIONS: [&str; 4] = [
    "-o",
    "tcp.reassemble_out_of_order:TRUE",
    "-d",
    "udp.port==8472,vxlan",
];

/// The share of tshark's messages dnsloop must name.
const AGREEMENT: f64 = 0.99;

#[test]
fn analyze_names_the_messages_tshark_names_in_tricky_captures() {
    let test = test_name!();
    let needs = [
        Need::DnsloopBinary,
        Need::Tool("tshark"),
        Need::Tool("mergecap"),
        Need::Tool("editcap"),
        Need::PythonModule("scapy"),
    ];
    if !can_run(test, &needs) {
        return;
    }
    let dir = tempfile::tempdir().or_fail("making a directory for the corpus");
    let captures = corpus(dir.path());
    assert!(captures.len() >= 15, "the corpus: {captures:?}");

    let mut tshark_total = 0;
    let mut missing = BTreeMap::new();
    let mut extra = BTreeMap::new();
    for capture in &captures {
        let by_tshark = tshark_messages(capture, &TSHARK_OPTIONS);
        let trace = tracer::analyze(&dnsloop_bin(), capture, &["--packets"])
            .and_then(Trace::from_output)
            .or_fail(format_args!("dnsloop analyze {}", capture.display()));
        let by_dnsloop: Vec<MessageKey> = packet_lines(&trace)
            .iter()
            .map(MessageKey::from_dnsloop)
            .collect();
        assert!(!by_tshark.is_empty(), "tshark sees no DNS in {capture:?}");
        tshark_total += by_tshark.len();
        let name = capture
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let (only_tshark, only_dnsloop) = difference(by_tshark, by_dnsloop);
        if !only_tshark.is_empty() {
            missing.insert(name.clone(), only_tshark);
        }
        if !only_dnsloop.is_empty() {
            extra.insert(name, only_dnsloop);
        }
    }
    assert!(
        extra.is_empty(),
        "dnsloop names messages tshark does not see: {extra:#?}"
    );
    let missed: usize = missing.values().map(Vec::len).sum();
    let agreement = 1.0 - missed as f64 / tshark_total as f64;
    eprintln!(
        "{test}: dnsloop names {} of tshark's {tshark_total} messages in {} captures",
        tshark_total - missed,
        captures.len()
    );
    assert!(
        agreement >= AGREEMENT,
        "dnsloop names {:.1} % of tshark's {tshark_total} messages; it misses {missing:#?}",
        agreement * 100.0
    );
}

/// The captures `tests/corpus/tricky_captures.py` writes into `dir`, and pcapng files made from
/// some of them: several interfaces in one file, and the same cut at a snap length (UDP only:
/// where a snap length cuts TCP, tshark itself reads segments' middles as messages).
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/tricky_captures.py");
    run(Command::new("python3").arg(&script).arg(dir));
    let in_dir = |name: &str| dir.join(name);
    let several = in_dir("several_interfaces.pcapng");
    run(Command::new("mergecap").arg("-w").arg(&several).args(
        [
            "vlan_and_padding.pcap",
            "tcp_length_apart.pcap",
            "raw_ip.pcap",
            "cooked_v2.pcap",
        ]
        .map(in_dir),
    ));
    let udp_only = in_dir("udp_interfaces.pcapng");
    run(Command::new("mergecap").arg("-w").arg(&udp_only).args(
        [
            "vlan_and_padding.pcap",
            "raw_ip.pcap",
            "cooked_v1.pcap",
            "nanosecond.pcap",
        ]
        .map(in_dir),
    ));
    // 100 bytes hold every header and question of the corpus, and cut most answers.
    run(Command::new("editcap")
        .args(["-s", "100"])
        .arg(&udp_only)
        .arg(in_dir("snap_length.pcapng")));
    std::fs::remove_file(&udp_only).or_fail("removing the uncut file");
    let mut captures: Vec<PathBuf> = std::fs::read_dir(dir)
        .or_fail("listing the corpus")
        .map(|entry| entry.or_fail("listing the corpus").path())
        .collect();
    captures.sort();
    captures
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .or_fail(format_args!("running {command:?}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The messages only `left` names, and those only `right` names, counted with repeats.
fn difference(left: Vec<MessageKey>, right: Vec<MessageKey>) -> (Vec<MessageKey>, Vec<MessageKey>) {
    let mut counts: BTreeMap<MessageKey, i64> = BTreeMap::new();
    for key in left {
        *counts.entry(key).or_default() += 1;
    }
    for key in right {
        *counts.entry(key).or_default() -= 1;
    }
    let mut only_left = Vec::new();
    let mut only_right = Vec::new();
    for (key, count) in counts {
        let repeats = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
        let side = if count > 0 {
            &mut only_left
        } else {
            &mut only_right
        };
        side.extend(std::iter::repeat_n(key, repeats));
    }
    (only_left, only_right)
}

/// The port the test's own server answers on, apart from the lab's servers.
const TOOLS_PORT: &str = "5300";

#[test]
fn analyze_names_the_messages_tshark_names_in_captures_of_real_tools() {
    // Real resolvers' clients and a real server, on the lab: dig over UDP with a large EDNS
    // buffer (the 3 KB reply leaves the server as IP fragments) and over TCP, and kdig with
    // several queries on one kept-open TCP connection, and with EDNS padding. (The veth's
    // segmentation offload hands tcpdump a 3 KB reply as one segment: the corpus above cuts
    // TCP every way by hand.)
    let test = test_name!();
    let needs = [
        Need::Root,
        Need::DnsloopBinary,
        Need::Tool("tcpdump"),
        Need::Tool("tshark"),
        Need::Tool("dig"),
        Need::Tool("kdig"),
        Need::Tool("dnsmasq"),
    ];
    if !can_run(test, &needs) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let server_ip = Pod::CoreDnsA.ip().to_string();
    let big_text: Vec<String> = (0..12).map(|_| "x".repeat(250)).collect();
    let txt_record = format!("--txt-record=big.example.test,{}", big_text.join(","));
    let server = lab
        .spawn(
            &lab.pod_ns(Pod::CoreDnsA),
            &[
                "dnsmasq",
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                &format!("--listen-address={server_ip}"),
                &format!("--port={TOOLS_PORT}"),
                "--edns-packet-max=4096",
                "--address=/tools.example.test/192.0.2.1",
                &txt_record,
                "--pid-file=",
            ],
        )
        .or_fail(test);
    let _server = KillOnDrop(server);
    let client = lab.pod_ns(Pod::Client);
    let ask = |argv: &[&str]| lab.exec(&client, argv).or_fail(format_args!("{argv:?}"));
    // Waits for the server: it answers once it has bound its port.
    let at = format!("@{server_ip}");
    let ready = (0..50).any(|_| {
        let output = ask(&[
            "dig",
            "+tries=1",
            "+time=1",
            "-p",
            TOOLS_PORT,
            &at,
            "a.tools.example.test",
        ]);
        String::from_utf8_lossy(&output.stdout).contains("192.0.2.1")
    });
    assert!(ready, "dnsmasq never answered on {server_ip}:{TOOLS_PORT}");

    let dir = tempfile::tempdir().or_fail("a directory for the capture");
    let file = dir.path().join("tools.pcap");
    let capture = lab
        .capture_pcap(lab.node_ns(), &Pod::Client.host_veth(), "udp or tcp", &file)
        .or_fail(test);
    let port = ["-p", TOOLS_PORT, &at];
    for argv in [
        &["dig", "+bufsize=4096", "+ignore", "TXT", "big.example.test"][..],
        &["dig", "+tcp", "TXT", "big.example.test"][..],
        &[
            "kdig",
            "+tcp",
            "+keepopen",
            "A",
            "a.tools.example.test",
            "AAAA",
            "b.tools.example.test",
            "TXT",
            "big.example.test",
        ][..],
        &["kdig", "+tcp", "+padding", "A", "c.tools.example.test"][..],
    ] {
        let output = ask(&[&argv[..1], &port[..], &argv[1..]].concat());
        assert!(
            output.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    capture.stop().or_fail(test);

    let options = [
        &TSHARK_OPTIONS[..],
        &["-d", "udp.port==5300,dns", "-d", "tcp.port==5300,dns"],
    ]
    .concat();
    let by_tshark = tshark_messages(&file, &options);
    let trace = tracer::analyze(
        &dnsloop_bin(),
        &file,
        &["--packets", "--dns-port", TOOLS_PORT],
    )
    .and_then(Trace::from_output)
    .or_fail("dnsloop analyze of the tools' capture");
    let by_dnsloop: Vec<MessageKey> = packet_lines(&trace)
        .iter()
        .map(MessageKey::from_dnsloop)
        .collect();
    assert!(
        by_tshark.len() >= 12,
        "tshark sees the exchanges: {by_tshark:#?}"
    );
    let (only_tshark, only_dnsloop) = difference(by_tshark, by_dnsloop);
    assert!(
        only_tshark.is_empty() && only_dnsloop.is_empty(),
        "only tshark: {only_tshark:#?}\nonly dnsloop: {only_dnsloop:#?}\n{trace}"
    );
    let SummarySource::CaptureFile(summary) = &trace.summary().source else {
        panic!("analyze's summary has the file's numbers:\n{trace}");
    };
    assert!(summary.reassembly.ip_datagrams_reassembled >= 1, "{trace}");
}

/// A process of the test's own, killed and reaped however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
