//! Every kind of record, as the sinks write it, reads back into its schema type and writes
//! again to the same bytes.
use std::{io, time::Duration};

use dnsloop_ebpf::parse::Probe;
use serde_json::Value;

use super::*;
use crate::{
    analyzers::{testkit::*, Summary},
    finding::ConntrackEvidence,
    observation::{DnsName, Namespace, Question},
    sink::{samples::*, JsonSink, NodeName, Sink},
};

/// What the JSON sink writes for `write`, line by line.
fn lines(write: impl FnOnce(&mut JsonSink<&mut Vec<u8>>) -> io::Result<()>) -> Vec<String> {
    let mut out = Vec::new();
    write(&mut JsonSink::new(&mut out, &NodeName::new("node-\"a\""))).expect("writing to memory");
    String::from_utf8(out)
        .expect("JSON is UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn capture_file_numbers() -> SummarySource {
    SummarySource::CaptureFile(CaptureFileSummary {
        capture: CaptureFileInfo {
            file: "/tmp/node.pcap".into(),
            format: "pcap".into(),
            complete: false,
            note: Some("the file ends inside a packet".into()),
        },
        interfaces: vec![InterfaceCount {
            ifname: "any".into(),
            dir: "ingress".into(),
            dns_packets: 4,
            packets: 10,
        }],
        capture_interfaces: vec![PlacedInterface {
            ifname: "any".into(),
            linktype: 276,
            placed_by: "addresses".into(),
            node_mac: Some("02:00:00:00:00:01".into()),
        }],
        packets: CapturePackets {
            read: 10,
            dns: 4,
            not_dns: 5,
            malformed: 1,
            unsupported_link: 0,
            unplaced: 0,
        },
        malformed: [("bad_ihl", 1)].into_iter().collect(),
    })
}

/// Every kind of line `trace`, `analyze` and `capture` print, with every optional part both
/// present and absent.
fn sink_lines() -> Vec<String> {
    let mut odd = query("x.test.")
        .qtype(65280)
        .from("[fd00::2]:5353")
        .to("[fd00::1]:53")
        .tcp()
        .seen(CLIENT_OUT);
    odd.opcode = 3;
    odd.rcode = 4000;
    odd.question = DnsName::from_wire(b"\x05a\"\x07\xff\x00\x04test\x00").map(|name| Question {
        name,
        qtype: 65280,
        qclass: 1,
    });
    odd.point.enters = Some(Namespace::new("pod \"q\" \\ \u{1b}"));
    let mut bare = query("x.test.").seen(CLIENT_OUT);
    bare.question = None;
    let mut no_addresses = malformed_sample();
    no_addresses.addresses = None;
    let evidence = ConntrackEvidence {
        original_dst: addr("10.96.0.10:53"),
        reply_src: addr("10.244.0.3:53"),
        unreplied: true,
    };
    lines(|sink| {
        for finding in [
            a_loop(Probe::None),
            a_loop(Probe::CoreDns),
            a_loop_through_other_nodes(),
            a_loop_through_a_cluster_ip(),
            a_possible_loop(),
            an_unexpected_source(None),
            an_unexpected_source(Some(evidence)),
            a_timeout(),
            a_dropped_timeout(),
            a_slow_lookup(),
        ]
        .into_iter()
        .chain(drops())
        {
            sink.finding(&finding)?;
        }
        sink.bundle(&a_bundle_notice(true))?;
        sink.bundle(&a_bundle_notice(false))?;
        sink.packet(&reply("www.example.test.").id(4242).rcode(3).seen(CLIENT_IN))?;
        sink.packet(&odd)?;
        sink.packet(&bare)?;
        sink.malformed(&malformed_sample())?;
        sink.malformed(&no_addresses)?;
        let with_lookups = Summary {
            lookups: Some(lookups_followed()),
            ..a_summary()
        };
        sink.summary(&with_lookups, &kernel_numbers())?;
        sink.summary(&a_summary(), &capture_file_numbers())
    })
}

fn a_probe() -> Record {
    Record::Probe(ProbeRecord {
        server: addr("169.254.25.10:53"),
        proto: "udp".into(),
        qname: "8771826115.8395975159.".into(),
        qtype: "HINFO".into(),
        results: vec![
            ProbeResult {
                id: 8226,
                rcode: Some("REFUSED".into()),
                ms: 24.6,
                error: None,
            },
            ProbeResult {
                id: 8227,
                rcode: None,
                ms: 2000.0,
                error: Some("connection refused".into()),
            },
        ],
        traced: true,
        looped: Some(true),
        came_back: Some(296),
    })
}

fn doctor_records() -> Vec<DoctorRecord> {
    vec![
        DoctorRecord::Check(CheckRecord {
            id: "resolv.loopback-upstream".into(),
            severity: "error".into(),
            subject: "nameserver 127.0.0.53".into(),
            summary: "it loops".into(),
            fix: Some("point kubelet elsewhere".into()),
            file: Some("/etc/resolv.conf".into()),
            line: Some(3),
        }),
        DoctorRecord::Summary(DoctorSummaryRecord {
            error: 1,
            warning: 0,
            info: 0,
            ok: 4,
        }),
    ]
}

fn a_capture_report() -> CaptureReport {
    let records: Vec<Record> = sink_lines()
        .iter()
        .map(|line| serde_json::from_str(line).expect("a record"))
        .collect();
    let summary = records.iter().find_map(|record| match record {
        Record::Summary(summary) => Some(summary.clone()),
        _ => None,
    });
    CaptureReport {
        dnsloop: "0.1.0".into(),
        kernel: Some("6.18.0".into()),
        hostname: None,
        started: ms(0).into(),
        ended: ms(30_000).into(),
        duration_limit_s: 30.0,
        pcapng: PcapngFile {
            file: "capture.pcapng".into(),
            packets: 10,
            bytes: 1000,
            commented: 4,
            left_out: 0,
            unplaced: 0,
            note: None,
        },
        interfaces: vec![CapturedInterface {
            ifname: "cni0".into(),
            description: "dnsloop/2 role=bridge".into(),
        }],
        findings: records
            .into_iter()
            .filter(|record| {
                matches!(
                    record,
                    Record::Loop(_)
                        | Record::PossibleLoop(_)
                        | Record::UnexpectedSource(_)
                        | Record::Timeout(_)
                        | Record::Drop(_)
                )
            })
            .collect(),
        summary,
        node: NodeDnsConfig {
            resolv_conf: ResolvConf {
                path: "/etc/resolv.conf".into(),
                symlink_to: Some("/run/systemd/resolve/stub-resolv.conf".into()),
                content: Some("nameserver 127.0.0.53\n".into()),
            },
            sysctls: [
                ("net.bridge.bridge-nf-call-iptables", Some("0".to_owned())),
                ("net.ipv4.ip_forward", None),
            ]
            .into_iter()
            .collect(),
            checks: doctor_records(),
        },
        recorded: Some(RecordedBundle {
            finding: "loop".into(),
            loop_id: Some("0123456789abcdef".into()),
            qname: Some("www.example.test.".into()),
            from: ms(0).into(),
            until: ms(6_123).into(),
            complete: false,
        }),
    }
}

/// A sample of every object dnsloop prints, by the schema type it is.
pub fn every_record() -> Vec<(&'static str, Value)> {
    let mut records: Vec<Record> = sink_lines()
        .iter()
        .map(|line| serde_json::from_str(line).expect("a record"))
        .collect();
    records.push(a_probe());
    let mut every: Vec<(&'static str, Value)> = records
        .iter()
        .map(|record| {
            let name = match record {
                Record::Loop(_) | Record::PossibleLoop(_) => "LoopRecord",
                Record::UnexpectedSource(_) => "UnexpectedSourceRecord",
                Record::Timeout(_) => "TimeoutRecord",
                Record::Drop(_) => "DropRecord",
                Record::Lookup(_) => "LookupRecord",
                Record::Bundle(_) => "BundleRecord",
                Record::Malformed(_) => "MalformedRecord",
                Record::Packet(_) => "PacketRecord",
                Record::Summary(_) => "SummaryRecord",
                Record::Probe(_) => "ProbeRecord",
            };
            (name, serde_json::to_value(record).expect("a record"))
        })
        .collect();
    for record in doctor_records() {
        let name = match record {
            DoctorRecord::Check(_) => "CheckRecord",
            DoctorRecord::Summary(_) => "DoctorSummaryRecord",
        };
        every.push((name, serde_json::to_value(&record).expect("a record")));
    }
    every.push((
        "CaptureReport",
        serde_json::to_value(a_capture_report()).expect("a report"),
    ));
    every
}

#[test]
fn every_line_the_sink_writes_reads_back_into_its_record_and_writes_alike() {
    let lines = sink_lines();
    let mut kinds: Vec<&str> = Vec::new();
    for line in &lines {
        let record: Record = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not a schema record: {error}: {line}"));
        assert_eq!(&serde_json::to_string(&record).unwrap(), line);
        let kind = line.split('"').nth(3).expect("the kind first");
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    assert_eq!(
        kinds,
        [
            "loop",
            "possible_loop",
            "unexpected_source",
            "timeout",
            "lookup",
            "drop",
            "bundle",
            "packet",
            "malformed",
            "summary"
        ]
    );
}

#[test]
fn a_capture_file_summary_reads_back_as_one() {
    let lines = sink_lines();
    let Ok(Record::Summary(summary)) = serde_json::from_str(lines.last().unwrap()) else {
        panic!("the last line is a summary: {lines:?}");
    };
    assert_eq!(summary.source, capture_file_numbers());
    assert_eq!(summary.interfaces()[0].ifname, "any");
    assert_eq!(summary.kernel(), None);
}

#[test]
fn probe_doctor_and_capture_records_read_back_and_write_alike() {
    let probe = serde_json::to_string(&a_probe()).unwrap();
    assert!(
        probe.starts_with(r#"{"kind":"probe","server":"169.254.25.10:53","#),
        "{probe}"
    );
    let read: Record = serde_json::from_str(&probe).unwrap();
    assert_eq!(serde_json::to_string(&read).unwrap(), probe);

    for record in doctor_records() {
        let line = serde_json::to_string(&record).unwrap();
        let read: DoctorRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), line);
    }

    let report = serde_json::to_string_pretty(&a_capture_report()).unwrap();
    assert!(
        report.starts_with("{\n  \"kind\": \"capture\",\n"),
        "{report}"
    );
    assert!(
        report.contains("\"summary\": {\n    \"kind\": \"summary\","),
        "{report}"
    );
    let read: CaptureReport = serde_json::from_str(&report).unwrap();
    assert_eq!(read, a_capture_report());
    assert_eq!(serde_json::to_string_pretty(&read).unwrap(), report);
}

#[test]
fn timestamps_are_utc_milliseconds_and_read_back() {
    let at = Timestamp(ms(1_123) + Duration::from_nanos(999));
    let json = serde_json::to_string(&at).unwrap();
    assert_eq!(json, r#""2025-01-01T12:00:01.123Z""#);
    let read: Timestamp = serde_json::from_str(&json).unwrap();
    assert_eq!(read, Timestamp(ms(1_123)));
    assert!(serde_json::from_str::<Timestamp>(r#""yesterday""#).is_err());
    assert_eq!(read.since(Timestamp(ms(123))), Duration::from_secs(1));
    assert_eq!(Timestamp(ms(123)).since(read), Duration::ZERO);
}

#[test]
fn counts_keep_their_order() {
    let counts: Counts =
        serde_json::from_str(r#"{"packets":10,"dns_packets":4,"b":1,"a":2}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&counts).unwrap(),
        r#"{"packets":10,"dns_packets":4,"b":1,"a":2}"#
    );
    assert_eq!(counts.get("b"), Some(&1));
    assert_eq!(counts.get("c"), None);
}
