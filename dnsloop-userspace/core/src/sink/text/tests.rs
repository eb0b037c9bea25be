use dnsloop_shared::parse::Probe;

use super::*;
use crate::{
    finding::ConntrackEvidence,
    observation::{DnsName, Question},
    testkit::observations::*,
    testkit::samples::*,
};

fn written(write: impl FnOnce(&mut TextSink<&mut Vec<u8>>) -> io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut TextSink::new(&mut out, &Names::AsSent)).expect("writing to memory");
    String::from_utf8(out).expect("text is UTF-8")
}

#[test]
fn a_malformed_sample_is_one_line() {
    assert_eq!(
        written(|sink| sink.malformed(&malformed_sample())),
        "12:00:01.500  MALFORMED  dns_compression_pointer on cni0 ingress, \
             10.244.0.2:41234 -> 10.96.0.10:53 (a sample; all are counted): 12340100c00c\n"
    );
}

#[test]
fn a_loop_is_one_line_then_its_path() {
    let mut first = a_loop(Probe::CoreDns);
    if let Finding::Loop(found) = &mut first {
        found.count = 1;
        found.since = found.ts;
    }
    let text = written(|sink| sink.finding(&first));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "12:00:01.123  LOOP  x1 [coredns probe]  www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream  [loop_id 0123456789abcdef]",
            "  12:00:01.001  cni0             egress   10.244.0.1:50000 -> 10.244.0.3:53  id 1000  [leaves node]",
            "  12:00:01.123  cni0             ingress  10.244.0.3:40000 -> 169.254.25.10:53  id 2000  [enters node]",
        ]
    );
}

#[test]
fn a_possible_loop_is_tagged_apart_and_says_what_was_not_seen() {
    let text = written(|sink| sink.finding(&a_possible_loop()));
    let first = text.lines().next().expect("a line");
    assert!(
        first.starts_with("12:00:01.123  POSSIBLE LOOP  x1  www.example.test. A: node"),
        "{first}"
    );
    assert!(first.contains("Not confirmed: nothing shows that node holds 169.254.25.10"));
}

#[test]
fn a_repeated_loop_is_one_line_with_its_count() {
    let text = written(|sink| sink.finding(&a_loop(Probe::CoreDns)));
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["12:00:01.123  LOOP  x3 [coredns probe]  www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream  [loop_id 0123456789abcdef]"]
    );
}

#[test]
fn a_loop_through_a_cluster_ip_names_the_service_on_its_line_and_path() {
    let text = written(|sink| sink.finding(&a_loop_through_a_cluster_ip()));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "12:00:01.123  LOOP  x1  www.example.test. A: node -> 10.96.0.10 (DNAT -> 10.244.0.3) (pod 10.244.0.3) -> 169.254.25.10 (node) (2 hops): check the upstream  [loop_id 0123456789abcdef]",
            "  12:00:01.001  cni0             egress   10.244.0.1:50000 -> 10.244.0.3:53 (10.96.0.10:53 via DNAT)  id 1000  [leaves node]",
            "  12:00:01.123  cni0             ingress  10.244.0.3:40000 -> 169.254.25.10:53  id 2000  [enters node]",
        ]
    );
}

#[test]
fn unexpected_sources_show_the_evidence_once_an_enricher_added_it() {
    let bare = written(|sink| sink.finding(&an_unexpected_source(None)));
    assert_eq!(bare.lines().count(), 1);
    assert!(bare.starts_with(
        "12:00:02.000  UNEXPECTED SOURCE  www.example.test. A  reply to 10.244.0.2:41234"
    ));
    let evidence = ConntrackEvidence {
        original_dst: addr("10.96.0.10:53"),
        reply_src: addr("10.244.0.3:53"),
        unreplied: true,
    };
    let enriched = written(|sink| sink.finding(&an_unexpected_source(Some(evidence))));
    let lines: Vec<&str> = enriched.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "  cause: br_netfilter is off",
            "  conntrack: sent to 10.96.0.10:53, reply expected from 10.244.0.3:53, never replied",
        ]
    );
}

#[test]
fn a_slow_lookup_is_one_line_then_its_hops_with_the_slowest_marked() {
    let text = written(|sink| sink.finding(&a_slow_lookup()));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("12:00:00.153  SLOW  153.0ms  pod 10.244.0.2 waited"),
        "{text}"
    );
    assert!(lines[3].contains("pod 10.244.0.3 -> 10.255.0.53:53 (off the node via eth0)  id 2000  NOERROR 150.0ms, own 150.0ms  <- slowest"), "{text}");
    assert!(
        lines[2].contains("node -> 10.96.0.10:53 (DNAT -> 10.244.0.3:53, pod 10.244.0.3)"),
        "{text}"
    );
    // Each forward is indented under the query it forwards.
    let indent = |line: &str| line.len() - line.trim_start().len();
    assert!(
        indent(lines[1]) < indent(lines[2]) && indent(lines[2]) < indent(lines[3]),
        "{text}"
    );
}

#[test]
fn the_summary_times_each_servers_hops_when_lookups_were_followed() {
    let summary = Summary {
        lookups: Some(lookups_followed()),
        ..a_summary()
    };
    let text = written(|sink| sink.summary(&summary, &SummarySource::Kernel(Default::default())));
    assert!(
        text.contains("lookups: 20 followed, 1 slower than 100.0ms (1 reported, 0 suppressed)"),
        "{text}"
    );
    assert!(text.contains("10.255.0.53:53"), "{text}");
}

#[test]
fn a_timeout_is_one_line() {
    assert_eq!(
        written(|sink| sink.finding(&a_timeout())),
        "12:00:03.000  TIMEOUT  no answer from 10.255.0.99:53 for corp.example. A (client 10.244.0.3:5353, id 77) after 2.0s\n"
    );
}

#[test]
fn a_truncation_not_retried_is_one_line() {
    assert_eq!(
        written(|sink| sink.finding(&a_truncation_not_retried())),
        "12:00:02.010  TRUNCATED  10.244.0.2 (pod default/alpine) took a truncated answer from 169.254.25.10:53 (the latest for big.example.test. A, 508 bytes, TC set) and did not ask again over TCP within 2.0s\n"
    );
}

#[test]
fn a_repeated_timeout_is_one_line_with_its_count() {
    let Finding::Timeout(mut found) = a_timeout() else {
        unreachable!("a timeout")
    };
    found.count = 37;
    found.summary = "no answer from 10.255.0.99:53 for corp.example. A: 37 more queries".into();
    assert_eq!(
        written(|sink| sink.finding(&Finding::Timeout(found))),
        "12:00:03.000  TIMEOUT x37  no answer from 10.255.0.99:53 for corp.example. A: 37 more queries\n"
    );
}

#[test]
fn a_loop_with_unanswered_queries_counts_them_on_its_line() {
    let Finding::Loop(mut found) = a_loop(Probe::None) else {
        unreachable!("a loop")
    };
    found.unanswered = 4567;
    let text = written(|sink| sink.finding(&Finding::Loop(found)));
    assert!(
        text.starts_with("12:00:01.123  LOOP  x3, 4567 unanswered  www.example.test. A"),
        "{text}"
    );
}

#[test]
fn the_summary_says_how_many_timeouts_were_folded() {
    let mut summary = a_summary();
    summary.findings.timeouts = 2;
    summary.timeouts.queries = 5012;
    summary.timeouts.in_loops = 4980;
    summary.timeouts.in_repeats = 30;
    let text = written(|sink| sink.summary(&summary, &kernel_numbers()));
    assert_eq!(
        text.lines().nth(1),
        Some(
            "findings: 0 loop, 0 unexpected source, 2 timeout (5012 queries timed out: 4980 \
                 counted in loops' reports, 30 in repeated timeouts)"
        )
    );
}

#[test]
fn packets_are_one_line_each() {
    let asked = query("www.example.test.")
        .id(4242)
        .at_ms(1_123)
        .seen(NODE_FROM_BRIDGE);
    let answered = reply("www.example.test.")
        .id(4242)
        .rcode(3)
        .tcp()
        .at_ms(1_124)
        .seen(CLIENT_IN);
    let text = written(|sink| {
        sink.packet(&asked)?;
        sink.packet(&answered)
    });
    assert_eq!(
        text,
        "12:00:01.123 cni0 ingress udp 10.244.0.2:41234 -> 169.254.25.10:53 id 4242 query A www.example.test.  [enters node]\n\
             12:00:01.124 veth-client egress tcp 10.244.0.2:41234 -> 169.254.25.10:53 id 4242 reply NXDOMAIN A www.example.test.  [enters pod 10.244.0.2]\n"
    );
}

#[test]
fn control_bytes_never_reach_the_terminal() {
    let mut obs = query("x.test.").seen(CLIENT_OUT);
    obs.question = DnsName::from_wire(b"\x09\x1b[31mred\x07\x00").map(|name| Question {
        name,
        qtype: A,
        qclass: 1,
    });
    std::sync::Arc::make_mut(&mut obs.point).ifname = "eth\u{1b}]0;owned\u{7}\u{85}".into();
    let text = written(|sink| sink.packet(&obs));
    assert!(
        !text.trim_end_matches('\n').chars().any(char::is_control),
        "{text:?}"
    );
    assert!(text.contains("eth\\027]0;owned\\007\\u{85} "), "{text}");
    assert!(text.contains(" A \\027[31mred\\007."), "{text}");
}

#[test]
fn the_byte_scan_misses_no_control_character() {
    let mut utf8 = [0; 4];
    for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
        if c.is_control() {
            assert!(may_hold_control(c.encode_utf8(&mut utf8)), "{c:?}");
        }
    }
    assert!(!may_hold_control(
        "12:00:01.123456 veth-client ingress udp é ü"
    ));
}

#[test]
fn summary_table_with_the_callers_numbers() {
    let text = written(|sink| sink.summary(&a_summary(), &kernel_numbers()));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "summary: 1234 observations (2 out of order), 1 queries unanswered at the end"
    );
    assert_eq!(lines[1], "findings: 0 loop, 0 unexpected source, 0 timeout");
    assert_eq!(
        lines[2],
        "evictions (tables full, findings may be missed): timeout 5"
    );
    assert!(
        lines[3].contains("server") && lines[3].contains("p99"),
        "{text}"
    );
    assert!(lines[4].starts_with("  169.254.25.10:53 "), "{text}");
    assert!(
        lines[4].ends_with(
            " 30    1.20ms    3.00ms    10.0ms    12.0ms  NOERROR 28, NXDOMAIN 2, truncated 1"
        ),
        "{text}"
    );
    assert!(!text.lines().any(|line| line.ends_with(' ')), "{text}");
    assert!(lines.contains(&"lost_events: 3"), "{text}");
    assert!(
        lines.contains(&"conntrack during the run (every flow's): 12 clashes resolved, 0 insert_failed, 0 dropped"),
        "{text}"
    );
    assert!(
        lines.contains(&"kernel drops of DNS packets: NETFILTER_DROP 3"),
        "{text}"
    );
    assert!(lines.contains(&"kernel: packets 10"), "{text}");
    assert!(
        lines
            .iter()
            .any(|line| line.contains("cni0") && line.contains("ingress")),
        "{text}"
    );
}
