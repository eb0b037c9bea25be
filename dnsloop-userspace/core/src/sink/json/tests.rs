use std::collections::BTreeSet;

use dnsloop_shared::parse::Probe;

use serde_json::{json, Value};

use super::*;
use crate::{
    finding::ConntrackEvidence, observation::DnsName, testkit::observations::*, testkit::samples::*,
};

/// Writes with `write`, and parses each line back.
fn lines(write: impl FnOnce(&mut JsonSink<&mut Vec<u8>>) -> io::Result<()>) -> Vec<Value> {
    let mut out = Vec::new();
    write(&mut JsonSink::new(
        &mut out,
        &NodeName::new("node-a"),
        &Names::AsSent,
    ))
    .expect("writing to memory");
    String::from_utf8(out)
        .expect("JSON is UTF-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
        .collect()
}

#[test]
fn a_malformed_sample_says_why_where_and_what_it_held() {
    let [sample] = lines(|sink| sink.malformed(&malformed_sample()))
        .try_into()
        .expect("one line");
    assert_eq!(
        sample,
        serde_json::json!({
            "kind": "malformed",
            "ts": "1970-01-01T12:00:01.500Z",
            "ifname": "cni0",
            "dir": "ingress",
            "reason": "dns_compression_pointer",
            "src": "10.244.0.2:41234",
            "dst": "10.96.0.10:53",
            "head": "12340100c00c",
            "node": "node-a",
        })
    );
}

fn one(write: impl FnOnce(&mut JsonSink<&mut Vec<u8>>) -> io::Result<()>) -> Value {
    let mut lines = lines(write);
    assert_eq!(lines.len(), 1);
    lines.remove(0)
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

#[test]
fn packet_fields() {
    let obs = reply("www.example.test.")
        .id(4242)
        .rcode(3)
        .at_ms(1_123)
        .seen(CLIENT_IN);
    let value = one(|sink| sink.packet(&obs));
    assert_eq!(
        keys(&value),
        set(&[
            "kind", "ts", "ifname", "dir", "proto", "src", "dst", "id", "qr", "opcode", "rcode",
            "qname", "qtype", "size", "leaves", "enters", "node"
        ])
    );
    assert_eq!(value["kind"], "packet");
    assert_eq!(value["ts"], "2025-01-01T12:00:01.123Z");
    assert_eq!(value["ifname"], "veth-client");
    assert_eq!(value["dir"], "egress");
    assert_eq!(value["proto"], "udp");
    assert_eq!(value["src"], "10.244.0.2:41234");
    assert_eq!(value["dst"], "169.254.25.10:53");
    assert_eq!(value["id"], 4242);
    assert_eq!(value["qr"], true);
    assert_eq!(value["opcode"], "QUERY");
    assert_eq!(value["rcode"], "NXDOMAIN");
    assert_eq!(value["qname"], "www.example.test.");
    assert_eq!(value["qtype"], "A");
    assert_eq!(value["size"], 40);
    // The namespaces the packet left and entered, as in a loop's path.
    assert_eq!(value["leaves"], Value::Null);
    assert_eq!(value["enters"], "pod 10.244.0.2");
    assert_eq!(value["node"], "node-a");
}

#[test]
fn packet_edge_cases_stay_valid_and_typed() {
    let mut odd = query("x.test.")
        .qtype(65280)
        .from("[fd00::2]:5353")
        .to("[fd00::1]:53")
        .tcp()
        .seen(CLIENT_OUT);
    odd.opcode = 3;
    odd.rcode = 4000;
    odd.question = DnsName::from_wire(b"\x05a\"\x07\xff\x00\x04test\x00").map(|name| {
        crate::observation::Question {
            name,
            qtype: 65280,
            qclass: 1,
        }
    });
    let mut bare = query("x.test.").seen(CLIENT_OUT);
    bare.question = None;
    let values = lines(|sink| {
        sink.packet(&odd)?;
        sink.packet(&bare)
    });
    assert_eq!(values[0]["src"], "[fd00::2]:5353");
    assert_eq!(values[0]["proto"], "tcp");
    assert_eq!(values[0]["qtype"], "TYPE65280");
    assert_eq!(values[0]["opcode"], "3");
    assert_eq!(values[0]["rcode"], "RCODE4000");
    assert_eq!(values[0]["qname"], "a\\\"\\007\\255\\000.test.");
    assert_eq!(values[1]["qname"], Value::Null);
    assert_eq!(values[1]["qtype"], Value::Null);
}

#[test]
fn loop_fields() {
    let value = one(|sink| sink.finding(&a_loop(Probe::None)));
    assert_eq!(
        keys(&value),
        set(&[
            "kind",
            "ts",
            "loop_id",
            "since",
            "qname",
            "qtype",
            "count",
            "unanswered",
            "rounds_per_s",
            "path",
            "off_node",
            "servers",
            "probe",
            "unconfirmed",
            "summary",
            "dnat",
            "node"
        ])
    );
    assert_eq!(value["kind"], "loop");
    assert_eq!(value["ts"], "2025-01-01T12:00:01.123Z");
    assert_eq!(value["loop_id"], "0123456789abcdef");
    assert_eq!(value["since"], "2025-01-01T12:00:01.001Z");
    // Less than a second of it: no rate yet.
    assert_eq!(value["rounds_per_s"], Value::Null);
    assert_eq!(value["off_node"], json!([]));
    assert_eq!(value["node"], "node-a");
    assert_eq!(value["qtype"], "A");
    assert_eq!(value["count"], 3);
    assert_eq!(value["unanswered"], 0);
    assert_eq!(value["probe"], Value::Null);
    assert_eq!(value["servers"], json!(["10.244.0.3", "169.254.25.10"]));
    assert_eq!(value["dnat"], json!([]));
    let path = value["path"].as_array().expect("path is an array");
    assert_eq!(path.len(), 2);
    assert_eq!(
        keys(&path[0]),
        set(&["ts", "ifname", "dir", "src", "dst", "id", "leaves", "enters"])
    );
    assert_eq!(
        path[1],
        json!({
            "ts": "2025-01-01T12:00:01.123Z",
            "ifname": "cni0",
            "dir": "ingress",
            "src": "10.244.0.3:40000",
            "dst": "169.254.25.10:53",
            "id": 2000,
            "leaves": null,
            "enters": "node",
        })
    );
    assert!(value["summary"]
        .as_str()
        .expect("a string")
        .starts_with("loop: www.example.test. A"));
    assert_eq!(
        one(|sink| sink.finding(&a_loop(Probe::CoreDns)))["probe"],
        "coredns"
    );
    assert_eq!(
        one(|sink| sink.finding(&a_loop(Probe::Dnsmasq)))["probe"],
        "dnsmasq"
    );
}

#[test]
fn a_loop_through_other_nodes_says_where_it_left_and_came_back() {
    let value = one(|sink| sink.finding(&a_loop_through_other_nodes()));
    assert_eq!(
        value["off_node"],
        json!([{
            "left_via": "vxlan0",
            "sent_to": "10.244.1.3:53",
            "back_from": "10.244.1.0:41000",
            "back_via": "vxlan0",
        }])
    );
    assert_eq!(value["count"], 40);
    assert_eq!(value["rounds_per_s"], 20.0);
}

#[test]
fn a_loop_through_a_cluster_ip_lists_its_dnat_and_keeps_the_servers_seen() {
    let value = one(|sink| sink.finding(&a_loop_through_a_cluster_ip()));
    assert_eq!(
        value["dnat"],
        json!([{"service": "10.96.0.10:53", "backend": "10.244.0.3:53"}])
    );
    assert_eq!(value["servers"], json!(["10.244.0.3", "169.254.25.10"]));
}

#[test]
fn unexpected_source_fields() {
    let value = one(|sink| sink.finding(&an_unexpected_source(None)));
    assert_eq!(
        keys(&value),
        set(&[
            "kind",
            "ts",
            "client",
            "expected",
            "actual",
            "id",
            "qname",
            "qtype",
            "conntrack",
            "cause",
            "summary",
            "node"
        ])
    );
    assert_eq!(value["kind"], "unexpected_source");
    assert_eq!(value["client"], "10.244.0.2:41234");
    assert_eq!(value["expected"], "10.96.0.10:53");
    assert_eq!(value["actual"], "10.244.0.3:53");
    assert_eq!(value["id"], 4242);
    assert_eq!(value["conntrack"], Value::Null);
    assert_eq!(value["cause"], Value::Null);

    let evidence = ConntrackEvidence {
        original_dst: addr("10.96.0.10:53"),
        reply_src: addr("10.244.0.3:53"),
        unreplied: true,
    };
    let value = one(|sink| sink.finding(&an_unexpected_source(Some(evidence))));
    assert_eq!(
        value["conntrack"],
        json!({"original_dst": "10.96.0.10:53", "reply_src": "10.244.0.3:53", "unreplied": true})
    );
    assert_eq!(value["cause"], "br_netfilter is off");
}

#[test]
fn timeout_fields() {
    let value = one(|sink| sink.finding(&a_timeout()));
    assert_eq!(
        keys(&value),
        set(&[
            "kind",
            "ts",
            "client",
            "server",
            "id",
            "count",
            "qname",
            "qtype",
            "names_under",
            "waited_ms",
            "dropped",
            "stale_conntrack",
            "summary",
            "node"
        ])
    );
    assert_eq!(value["names_under"], serde_json::Value::Null);
    assert_eq!(value["dropped"], serde_json::Value::Null);
    assert_eq!(value["stale_conntrack"], serde_json::Value::Null);
    assert_eq!(value["count"], 1);
    assert_eq!(value["kind"], "timeout");
    assert_eq!(value["ts"], "2025-01-01T12:00:03.000Z");
    assert_eq!(value["server"], "10.255.0.99:53");
    assert_eq!(value["waited_ms"], 2000);
}

#[test]
fn summary_fields_with_the_callers_merged_in() {
    let value = one(|sink| sink.summary(&a_summary(), &kernel_numbers()));
    assert_eq!(value["kind"], "summary");
    assert_eq!(value["ts"], "2025-01-01T12:01:00.000Z");
    assert_eq!(value["observations"], 1234);
    assert_eq!(value["late_observations"], 2);
    assert_eq!(
        value["findings"],
        json!({"loop": 0, "possible_loop": 0, "unexpected_source": 0, "timeout": 0, "drop": 0, "truncated_not_retried": 0, "search_list_waste": 0, "servfail_storm": 0, "fragmented_reply_lost": 0})
    );
    assert_eq!(value["evictions"], json!({"reorder": 0, "timeout": 5}));
    assert_eq!(
        value["timeouts"],
        json!({"queries": 0, "in_loops": 0, "in_repeats": 0})
    );
    assert_eq!(value["unanswered_at_end"], 1);
    assert_eq!(value["lost_events"], 3);
    assert_eq!(value["drops"], json!({"NETFILTER_DROP": 3}));
    assert_eq!(value["interfaces"][0]["ifname"], "cni0");
    let server = &value["servers"][0];
    assert_eq!(
        keys(server),
        set(&[
            "server",
            "count",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "max_ms",
            "rcodes",
            "truncated"
        ])
    );
    assert_eq!(server["server"], "169.254.25.10:53");
    assert_eq!(server["count"], 30);
    assert_eq!(server["p50_ms"], 1.2);
    assert_eq!(server["max_ms"], 12.0);
    assert_eq!(server["rcodes"], json!({"NOERROR": 28, "NXDOMAIN": 2}));
    assert_eq!(server["truncated"], 1);
}

#[test]
fn strings_are_written_as_serde_json_writes_them() {
    let ascii = (0..=0x7f_u8).map(|byte| char::from(byte).to_string());
    let others = [
        "",
        "veth-client",
        "pod 10.244.0.2",
        "a\\\\b.",
        "\\\"quoted\\\"",
        "caf\u{e9} \u{85} \u{2028} \u{1f600}",
        "tab\there",
    ]
    .map(String::from);
    // Long enough for several of the scan's blocks, with the byte to escape in the last.
    let long = format!("{}\u{1b}", "x".repeat(100));
    for text in ascii.chain(others).chain([long]) {
        let mut written = Vec::new();
        string(&mut written, &text).expect("writing to memory");
        assert_eq!(
            String::from_utf8(written).expect("UTF-8"),
            serde_json::to_string(&text).expect("a string"),
            "{text:?}"
        );
    }
}

#[test]
fn every_mnemonic_is_a_json_string_as_it_is() {
    use dnsloop_shared::point::Direction;

    use crate::observation::Transport;

    let mnemonics = (0..=u16::MAX)
        .flat_map(|code| [mnemonic::qtype(code), mnemonic::rcode(code)])
        .chain((0..=u8::MAX).map(mnemonic::opcode))
        .chain(
            [Direction::Ingress.as_str(), Direction::Egress.as_str()]
                .into_iter()
                .chain([Transport::Udp.as_str(), Transport::Tcp.as_str()])
                .map(Into::into),
        );
    for mnemonic in mnemonics {
        let mut quoted = Vec::new();
        mnemonic_string(&mut quoted, &mnemonic);
        assert_eq!(
            String::from_utf8(quoted).expect("UTF-8"),
            serde_json::to_string(&mnemonic).expect("a string"),
        );
    }
}

/// Observations of every shape a packet line takes: every spot of the lab's node, queries
/// and replies, IPv4 and IPv6, UDP and TCP, names and interfaces to escape, no question,
/// codes without a name, times across seconds and out of RFC 3339's range.
fn assorted_observations() -> Vec<Observation> {
    let spots = [
        CLIENT_OUT,
        CLIENT_IN,
        COREDNS_OUT,
        COREDNS_IN,
        NODE_FROM_BRIDGE,
        NODE_TO_BRIDGE,
        NODE_TO_UPLINK,
        NODE_FROM_UPLINK,
        NODE_TO_OVERLAY,
        NODE_LO,
        COREDNS_LO,
        POD_B_TO_NODE,
    ];
    let mut observations = Vec::new();
    for (n, spot) in spots.into_iter().enumerate() {
        let n = n as u64;
        observations.push(
            query("www.example.test.")
                .id(n as u16)
                .at_us(n * 999_937)
                .seen(spot),
        );
        observations.push(
            reply("Kubernetes.Default.svc.cluster.local.")
                .rcode(n as u16)
                .qtype(HINFO)
                .tcp()
                .at_ms(n * 86_400_000)
                .seen(spot),
        );
    }
    let mut odd = query("x.test.")
        .qtype(65280)
        .from("[fd00::2]:5353")
        .to("[fe80::1%7]:53")
        .seen(CLIENT_OUT);
    odd.opcode = 3;
    odd.rcode = 4000;
    odd.question = DnsName::from_wire(b"\x05a\"\x07\xff\x00\x04test\x00").map(|name| {
        crate::observation::Question {
            name,
            qtype: 0,
            qclass: 1,
        }
    });
    std::sync::Arc::make_mut(&mut odd.point).ifname =
        "eth\u{1b}]0;\"x\\\u{7f}\u{85}\u{2028}\u{1f600}".into();
    std::sync::Arc::make_mut(&mut odd.point).enters =
        Some(crate::observation::Namespace::new("pod \"q\"\t\\"));
    let mut bare = query("x.test.").seen(NODE_TO_UPLINK);
    bare.question = None;
    bare.opcode = 255;
    let mut early = query(".").seen(CLIENT_OUT);
    early.ts = std::time::UNIX_EPOCH - std::time::Duration::from_secs(1);
    let mut late = reply("x.").seen(CLIENT_IN);
    late.ts = std::time::UNIX_EPOCH + std::time::Duration::from_secs(400_000_000_000);
    observations.extend([odd, bare, early, late]);
    observations
}

#[test]
fn packet_lines_are_the_schema_records_serde_writes() {
    use crate::schema::PacketRecord;

    for node in ["node-a", "node-\"a\"\n"] {
        let mut lines = PacketLines::for_node(&NodeName::new(node), &Names::AsSent);
        for obs in assorted_observations() {
            let written = String::from_utf8(lines.line(&obs).unwrap().to_vec()).unwrap();
            let record = Record::Packet(PacketRecord::new(&obs, node, &Names::AsSent));
            assert_eq!(
                written,
                format!("{}\n", serde_json::to_string(&record).unwrap()),
                "{obs:?}"
            );
        }
    }
}

/// Why `--packets` lines are written by hand: a measurement, not a test.
#[test]
#[ignore = "a measurement: cargo test --release -p dnsloop-core packet_lines_cost -- --ignored --nocapture"]
fn packet_lines_cost_less_than_serde() {
    use std::{hint::black_box, time::Instant};

    use crate::schema::PacketRecord;

    const ROUNDS: usize = 10_000;
    let node = NodeName::new("node-a");
    let observations = assorted_observations();
    let lines = (ROUNDS * observations.len()) as f64;
    let mut out = Vec::with_capacity(1 << 16);
    let mut by_hand = PacketLines::for_node(&node, &Names::AsSent);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        out.clear();
        for obs in &observations {
            out.extend_from_slice(by_hand.line(black_box(obs)).unwrap());
        }
    }
    let by_hand = started.elapsed().as_nanos() as f64 / lines;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        out.clear();
        for obs in &observations {
            let record = Record::Packet(PacketRecord::new(
                black_box(obs),
                node.as_str(),
                &Names::AsSent,
            ));
            serde_json::to_writer(&mut out, &record).unwrap();
            out.push(b'\n');
        }
    }
    let serde = started.elapsed().as_nanos() as f64 / lines;
    println!("ns per --packets line: by hand {by_hand:.0}, serde of a PacketRecord {serde:.0}");
}
