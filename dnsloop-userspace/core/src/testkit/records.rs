//! A sample of every record dnsloop prints, as the sinks write it: what the schema's tests
//! read back, and what the output reference checks every printed field against.
use std::io;

use dnsloop_shared::parse::Probe;
use serde_json::Value;

use super::{observations::*, samples::*};
use crate::{
    analyzers::Summary,
    finding::ConntrackEvidence,
    observation::{DnsName, Namespace, Question},
    present::names::Names,
    schema::*,
    sink::{JsonSink, NodeName, Sink},
};

/// What the JSON sink writes for `write`, line by line.
pub fn lines(write: impl FnOnce(&mut JsonSink<&mut Vec<u8>>) -> io::Result<()>) -> Vec<String> {
    let mut out = Vec::new();
    write(&mut JsonSink::new(
        &mut out,
        &NodeName::new("node-\"a\""),
        &Names::AsSent,
    ))
    .expect("writing to memory");
    String::from_utf8(out)
        .expect("JSON is UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn capture_file_numbers() -> SummarySource {
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
            in_reassembly: 3,
            unsupported_link: 0,
            unplaced: 0,
        },
        malformed: [("bad_ihl", 1)].into_iter().collect(),
        reassembly: Box::new(ReassemblySummary {
            tcp_messages_across_segments: 2,
            tcp_gaps: 1,
            tcp_bytes_lost: 40,
            ip_fragments: 2,
            ip_datagrams_incomplete: 1,
            incomplete_datagrams: vec![
                "10.96.0.10 > 10.244.1.5 id 0x1a2b: 1480 bytes of 2960".into()
            ],
            ..ReassemblySummary::default()
        }),
    })
}

/// Every kind of line `trace`, `analyze` and `capture` print, with every optional part both
/// present and absent.
pub fn sink_lines() -> Vec<String> {
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
    std::sync::Arc::make_mut(&mut odd.point).enters = Some(Namespace::new("pod \"q\" \\ \u{1b}"));
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
            a_truncation_not_retried(),
            a_search_list_waste(),
            a_servfail_storm(),
            a_fragmented_reply_lost(),
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

pub fn a_probe() -> Record {
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

pub fn doctor_records() -> Vec<DoctorRecord> {
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

pub fn a_capture_report() -> CaptureReport {
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
        pcapng: Some(PcapngFile {
            file: "capture.pcapng".into(),
            packets: 10,
            bytes: 1000,
            commented: 4,
            left_out: 0,
            unplaced: 0,
            note: None,
        }),
        names_redacted: false,
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
                Record::TruncatedNotRetried(_) => "TruncationRecord",
                Record::SearchListWaste(_) => "SearchListRecord",
                Record::ServfailStorm(_) => "ServfailRecord",
                Record::FragmentedReplyLost(_) => "FragmentationRecord",
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
