//! `analyze` reads what tshark reads. A corpus of captures that are hard to read right (DNS over
//! TCP cut every way, fragmented datagrams, every link layer tcpdump and dumpcap write,
//! nanosecond timestamps, pcapng with several interfaces and snap-length cuts, VXLAN and
//! Geneve, malformed records) is decoded by both; dnsloop must name at least 99 % of the
//! messages tshark names, and none that tshark does not.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use dnsloop_tests::{
    findings::Trace,
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
