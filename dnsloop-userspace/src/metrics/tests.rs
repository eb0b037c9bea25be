use std::{
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use dnsloop_shared::{
    counter::Counter,
    latency_buckets::bucket,
    parse::{Malformed, Probe},
    point::Direction,
    server::ServerStats,
};
use prometheus_client::encoding::text;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::kernel::counters::{GlobalCounts, PointCount};
use dnsloop_core::{
    doctor::ConntrackStats,
    finding::{
        ConntrackEvidence, Finding, FragmentationFinding, LoopFinding, LoopId, SearchListFinding,
        SlowestSearch, TimeoutFinding, TruncationFinding, Unconfirmable, Unconfirmed,
        UnexpectedSourceFinding,
    },
    observation::{DropCause, DropPlace, Namespace, Transport},
    present::names::Names,
    sink::TextSink,
};

fn address(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn a_loop() -> Finding {
    Finding::Loop(LoopFinding {
        ts: SystemTime::UNIX_EPOCH,
        since: SystemTime::UNIX_EPOCH,
        loop_id: LoopId(1),
        qname: "www.example.test.".into(),
        qtype: 1,
        count: 1,
        unanswered: 0,
        path: Vec::new(),
        off_node: Vec::new(),
        servers: Vec::new(),
        probe: Probe::None,
        summary: "a loop".into(),
        dnat: Vec::new(),
        unconfirmed: Vec::new(),
    })
}

/// A cycle through a namespace whose addresses were not known.
fn a_possible_loop() -> Finding {
    let Finding::Loop(found) = a_loop() else {
        unreachable!("a_loop is a loop");
    };
    Finding::Loop(LoopFinding {
        unconfirmed: vec![Unconfirmed {
            namespace: Namespace::new("node"),
            at: address("169.254.25.10:53"),
            why: Unconfirmable::AddressNotShown,
        }],
        unanswered: 3,
        ..found
    })
}

fn a_timeout(server: &str) -> Finding {
    Finding::Timeout(TimeoutFinding {
        ts: SystemTime::UNIX_EPOCH,
        client: address("10.244.0.2:41234"),
        server: address(server),
        id: 7,
        count: 1,
        qname: "www.example.test.".into(),
        qtype: 1,
        names_under: None,
        waited: Duration::from_secs(2),
        dropped: None,
        stale_conntrack: None,
        summary: format!("no answer from {server}"),
    })
}

fn an_unexpected_source() -> Finding {
    Finding::UnexpectedSource(UnexpectedSourceFinding {
        ts: SystemTime::UNIX_EPOCH,
        client: address("10.244.0.2:41234"),
        expected: address("10.96.0.10:53"),
        actual: address("10.244.0.5:53"),
        id: 7,
        qname: "www.example.test.".into(),
        qtype: 1,
        transport: Transport::Udp,
        conntrack: None,
        cause: None,
        summary: "a reply from elsewhere".into(),
    })
}

/// Answers with `rcodes` (rcode, count) and `latencies` in microseconds.
fn answers(rcodes: &[(usize, u64)], latencies: &[u64]) -> kernel::ServerAnswers {
    let mut stats = ServerStats::ZERO;
    for &(rcode, count) in rcodes {
        stats.rcodes[rcode] = count;
    }
    for &micros in latencies {
        stats.latency[bucket(micros)] += 1;
    }
    stats.truncated = rcodes.iter().map(|&(_, count)| count).sum::<u64>() / 4;
    let mut answers = kernel::ServerAnswers::default();
    answers.add(&stats);
    answers
}

/// A pod's truncated answers from the node cache not retried over TCP, `so_far` of them by
/// this report.
fn a_truncation_not_retried(so_far: u64) -> Finding {
    Finding::TruncatedNotRetried(TruncationFinding {
        ts: SystemTime::UNIX_EPOCH,
        client: address("10.244.0.2:41234"),
        client_namespace: Some(Namespace::new("pod default/alpine")),
        server: address("169.254.25.10:53"),
        id: 4242,
        qname: "big.example.test.".into(),
        qtype: 1,
        size: 508,
        waited: Duration::from_secs(2),
        count: so_far,
        summary: "a truncated answer not retried".into(),
    })
}

/// An upstream's replies to a pod lost to fragmentation, `so_far` of them by this report.
fn a_fragmented_reply_lost(so_far: u64) -> Finding {
    Finding::FragmentedReplyLost(FragmentationFinding {
        ts: SystemTime::UNIX_EPOCH,
        client: address("10.244.0.2:41234"),
        server: address("10.255.0.96:53"),
        id: 4242,
        qname: "large.example.test.".into(),
        qtype: 1,
        sizes: None,
        edns_udp_size: None,
        seen: Vec::new(),
        lost: DropCause {
            reason: "FRAG_REASM_TIMEOUT".into(),
            location: None,
            place: DropPlace {
                namespace: Some(Namespace::new("pod 10.244.0.2")),
                device: None,
            },
        },
        count: so_far,
        summary: "a reply lost to fragmentation".into(),
    })
}

/// A pod's lookups through its search list, reported with `server` as the one asked.
fn a_search_list_waste(server: SocketAddr) -> Finding {
    Finding::SearchListWaste(SearchListFinding {
        ts: SystemTime::UNIX_EPOCH,
        since: SystemTime::UNIX_EPOCH,
        client: "10.244.0.2".parse().unwrap(),
        client_namespace: None,
        server,
        queries: 8,
        wasted: 6,
        lookups: 1,
        extra: Duration::from_millis(6),
        slowest: SlowestSearch {
            qname: "api.example.com.".into(),
            qtype: 1,
            wasted: 6,
            extra: Duration::from_millis(6),
        },
        summary: "wasted 6 of 8 queries".into(),
    })
}

fn known_snapshot() -> KernelSnapshot {
    let point = |ifname: &str, direction, packets, dns_packets| PointCount {
        ifname: ifname.into(),
        direction,
        packets,
        dns_packets,
    };
    KernelSnapshot {
        interfaces: vec![
            point("cni0", Direction::Ingress, 10, 4),
            point("cni0", Direction::Egress, 12, 5),
        ],
        global: GlobalCounts {
            counters: vec![(Counter::Packets, 22), (Counter::LostRecords, 3)],
            malformed: vec![(Malformed::BadIhl, 2)],
        },
        servers: [(
            "169.254.25.10:53".to_owned(),
            answers(&[(0, 3), (3, 1)], &[300, 7_000, 7_000, 3_000_000]),
        )]
        .into(),
        drops: Some(vec![("NETFILTER_DROP".into(), 4)]),
        conntrack: Some(ConntrackStats {
            cpus: 2,
            insert_failed: 5,
            drop: 2,
            clashes_resolved: Some(97),
        }),
    }
}

fn exposition(registry: &Registry) -> String {
    let mut text = String::new();
    text::encode(&mut text, registry).unwrap();
    text
}

#[test]
fn a_registry_of_known_values_reads_as_prometheus_text() {
    let (registry, findings, _, snapshot) = registry();
    let servers = Rc::new(RefCell::new(ServerLabels::new(MAX_SERVER_LABELS)));
    let mut sink = CountingSink::new(
        Box::new(TextSink::new(io::sink(), &Names::AsSent)),
        findings,
        servers,
    );
    for finding in [
        a_loop(),
        a_loop(),
        a_possible_loop(),
        an_unexpected_source(),
        a_timeout("10.96.0.10:53"),
        a_truncation_not_retried(1),
        a_truncation_not_retried(3),
        a_search_list_waste(address("169.254.25.10:53")),
        a_fragmented_reply_lost(1),
        a_fragmented_reply_lost(2),
    ] {
        sink.finding(&finding).unwrap();
    }
    snapshot.replace(known_snapshot());

    let expected = r#"# HELP dnsloop_loops Forwarding loops reported: once when found, then at most once per --report-interval while the loop goes on.
# TYPE dnsloop_loops counter
dnsloop_loops_total 2
# HELP dnsloop_possible_loops Cycles of forwards that may be loops, where nothing showed that a namespace of the cycle took the question in: counted apart from loops, and paging no one.
# TYPE dnsloop_possible_loops counter
dnsloop_possible_loops_total 1
# HELP dnsloop_unexpected_sources Replies from an unexpected source reported (dropped by the client's socket): once when found, then at most once per --report-interval while they go on.
# TYPE dnsloop_unexpected_sources counter
dnsloop_unexpected_sources_total 1
# HELP dnsloop_timeouts Queries with no answer after --timeout, by the server they were sent to (a client's retries of one query count once); those of a question caught in a reported loop as server="loop".
# TYPE dnsloop_timeouts counter
dnsloop_timeouts_total{server="10.96.0.10:53"} 1
# HELP dnsloop_truncations_not_retried Truncated answers (TC set) whose client did not ask again over TCP within --timeout, by the server that sent them: the client used a cut answer.
# TYPE dnsloop_truncations_not_retried counter
dnsloop_truncations_not_retried_total{server="169.254.25.10:53"} 3
# HELP dnsloop_search_list_wasted_queries Clients' queries of search-list expansions answered NXDOMAIN before the name they expanded was asked (ndots), by the server asked; counted where every DNS packet is analysed (--slow, --packets).
# TYPE dnsloop_search_list_wasted_queries counter
dnsloop_search_list_wasted_queries_total{server="169.254.25.10:53"} 6
# HELP dnsloop_servfail_storms SERVFAIL storms reported (a server answering SERVFAIL at least 10 times a second, in a fifth of its answers): once when found, then at most once per --report-interval while it goes on; counted where every DNS packet is analysed.
# TYPE dnsloop_servfail_storms counter
dnsloop_servfail_storms_total 0
# HELP dnsloop_fragmented_replies_lost DNS replies lost to fragmentation, by the server that sent them: a host on their way held the first fragment and gave up waiting for the rest (FRAG_REASM_TIMEOUT); the client got no answer.
# TYPE dnsloop_fragmented_replies_lost counter
dnsloop_fragmented_replies_lost_total{server="10.255.0.96:53"} 2
# HELP dnsloop_packets Packets the kernel programs saw on the node's interfaces.
# TYPE dnsloop_packets counter
dnsloop_packets_total{interface="cni0",direction="ingress"} 10
dnsloop_packets_total{interface="cni0",direction="egress"} 12
# HELP dnsloop_dns_packets Packets on a DNS port holding at least one DNS message, on the node's interfaces.
# TYPE dnsloop_dns_packets counter
dnsloop_dns_packets_total{interface="cni0",direction="ingress"} 4
dnsloop_dns_packets_total{interface="cni0",direction="egress"} 5
"#;
    let text = exposition(&registry);
    assert!(text.starts_with(expected), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    for reason in Malformed::ALL {
        let value = if reason == Malformed::BadIhl { 2 } else { 0 };
        let line = format!(
            "dnsloop_malformed_packets_total{{reason=\"{}\"}} {value}",
            reason.as_str()
        );
        assert!(lines.contains(&line.as_str()), "no {line} in\n{text}");
    }
    let rest = r#"# HELP dnsloop_lost_events Packets the kernel could not hand to dnsloop because its ring buffer was full (raise --ring-buffer-mib): the findings may have missed them.
# TYPE dnsloop_lost_events counter
dnsloop_lost_events_total 3
# HELP dnsloop_untracked_queries New queries the kernel's query table had no room for (raise --query-table-size): their answers are not timed, and their timeouts go unreported.
# TYPE dnsloop_untracked_queries counter
dnsloop_untracked_queries_total 0
# HELP dnsloop_answers Answers that reached their client, by the server the query was sent to and rcode.
# TYPE dnsloop_answers counter
dnsloop_answers_total{server="169.254.25.10:53",rcode="NOERROR"} 3
dnsloop_answers_total{server="169.254.25.10:53",rcode="NXDOMAIN"} 1
# HELP dnsloop_truncated_answers Answers with TC set (cut to fit, for the client to ask again over TCP) that reached their client, by the server the query was sent to.
# TYPE dnsloop_truncated_answers counter
dnsloop_truncated_answers_total{server="169.254.25.10:53"} 1
# HELP dnsloop_conntrack_clashes_resolved Races between two packets of one new flow on two CPUs (a resolver's parallel A and AAAA queries from one socket) that the node's conntrack resolved without a drop, every flow's, since boot (Linux 5.6 and later).
# TYPE dnsloop_conntrack_clashes_resolved counter
dnsloop_conntrack_clashes_resolved_total 97
# HELP dnsloop_conntrack_insert_failed New flows' conntrack entries that lost the race to be inserted on the node, every flow's, since boot.
# TYPE dnsloop_conntrack_insert_failed counter
dnsloop_conntrack_insert_failed_total 5
# HELP dnsloop_conntrack_drops Packets the node's conntrack dropped because their entry could not be made (a lost race, a full table), every flow's, since boot: for DNS over UDP, each a 5-second timeout.
# TYPE dnsloop_conntrack_drops counter
dnsloop_conntrack_drops_total 2
# HELP dnsloop_answer_latency_seconds From a query's first sighting to its answer reaching the client, by the server the query was sent to. Bucket bounds are met to within 1/8 and the sum is estimated to within 1/16, from the kernel's finer buckets.
# TYPE dnsloop_answer_latency_seconds histogram
# UNIT dnsloop_answer_latency_seconds seconds
"#;
    assert!(text.contains(rest), "{text}");
    let histogram: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| line.starts_with("dnsloop_answer_latency_seconds_"))
        .collect();
    let server = r#"server="169.254.25.10:53""#;
    let expected_buckets: Vec<String> = [
        ("0.0005", 1),
        ("0.001", 1),
        ("0.002", 1),
        ("0.005", 1),
        ("0.01", 3),
        ("0.025", 3),
        ("0.05", 3),
        ("0.1", 3),
        ("0.25", 3),
        ("0.5", 3),
        ("1.0", 3),
        ("2.5", 3),
        ("5.0", 4),
        ("+Inf", 4),
    ]
    .iter()
    .map(|(le, count)| {
        format!("dnsloop_answer_latency_seconds_bucket{{le=\"{le}\",{server}}} {count}")
    })
    .collect();
    assert_eq!(histogram.len(), 2 + expected_buckets.len(), "{text}");
    let sum: f64 = histogram[0]
        .strip_prefix(&format!("dnsloop_answer_latency_seconds_sum{{{server}}} "))
        .and_then(|sum| sum.parse().ok())
        .unwrap_or_else(|| panic!("no sum first in\n{text}"));
    let true_sum = 0.0003 + 0.007 + 0.007 + 3.0;
    assert!(
        (sum - true_sum).abs() <= true_sum / 16.0,
        "{sum} vs {true_sum}"
    );
    assert_eq!(
        histogram[1],
        format!("dnsloop_answer_latency_seconds_count{{{server}}} 4")
    );
    assert_eq!(histogram[2..], expected_buckets, "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn the_counting_sink_passes_everything_on() {
    let (_, findings, _, _) = registry();
    let servers = Rc::new(RefCell::new(ServerLabels::new(MAX_SERVER_LABELS)));
    let mut written = Vec::new();
    {
        let mut sink = CountingSink::new(
            Box::new(TextSink::new(&mut written, &Names::AsSent)),
            findings,
            servers,
        );
        sink.finding(&a_timeout("10.96.0.10:53")).unwrap();
    }
    let written = String::from_utf8(written).unwrap();
    assert!(
        written.contains("no answer from 10.96.0.10:53"),
        "{written}"
    );
}

#[test]
fn timeouts_past_the_server_cap_are_counted_as_other() {
    let (registry, findings, _, _) = registry();
    let servers = Rc::new(RefCell::new(ServerLabels::new(2)));
    let mut sink = CountingSink::new(
        Box::new(TextSink::new(io::sink(), &Names::AsSent)),
        findings,
        servers,
    );
    for server in [
        "10.0.0.1:53",
        "10.0.0.2:53",
        "10.0.0.3:53",
        "10.0.0.4:53",
        "10.0.0.1:53",
    ] {
        sink.finding(&a_timeout(server)).unwrap();
    }
    let text = exposition(&registry);
    let timeouts: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("dnsloop_timeouts_total"))
        .collect();
    let mut timeouts = timeouts;
    timeouts.sort();
    assert_eq!(
        timeouts,
        [
            r#"dnsloop_timeouts_total{server="10.0.0.1:53"} 2"#,
            r#"dnsloop_timeouts_total{server="10.0.0.2:53"} 1"#,
            r#"dnsloop_timeouts_total{server="other"} 2"#,
        ]
    );
}

#[test]
fn kernel_answers_of_servers_past_the_cap_add_up_under_other() {
    let stats = |rcode: usize, count: u64, micros: u64| {
        let mut stats = ServerStats::ZERO;
        stats.rcodes[rcode] = count;
        stats.latency[bucket(micros)] = count;
        stats
    };
    let answered = vec![
        (address("10.0.0.9:53"), stats(2, 4, 9_000)),
        (address("10.0.0.1:53"), stats(0, 1, 1_000)),
        (address("10.0.0.5:53"), stats(0, 2, 5_000)),
    ];
    let servers = kernel::by_label(answered, &mut ServerLabels::new(1));
    let labels: Vec<&str> = servers.keys().map(String::as_str).collect();
    assert_eq!(labels, ["10.0.0.1:53", "other"], "named in address order");
    let other = &servers["other"];
    assert_eq!((other.rcodes[0], other.rcodes[2]), (2, 4));
    assert_eq!(other.latency.iter().sum::<u64>(), 6);
}

async fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn metrics_are_served_at_slash_metrics_only() {
    let exporter = Exporter::start(address("127.0.0.1:0")).await.unwrap();
    let served = exporter.address;
    assert_eq!(exporter.url(), format!("http://{served}/metrics"));

    let metrics = get(served, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(
        metrics.contains(
            "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("\r\n\r\n# HELP dnsloop_loops "),
        "{metrics}"
    );
    assert!(
        metrics.contains("dnsloop_lost_events_total 0\n"),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    let elsewhere = get(served, "/").await;
    assert!(
        elsewhere.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "{elsewhere}"
    );
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_error_at_startup() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = taken.local_addr().unwrap();
    let error = Exporter::start(address)
        .await
        .err()
        .expect("the port is taken");
    assert_eq!(
        error.to_string(),
        format!(
            "cannot serve metrics on {address}: port in use; choose another with --metrics-addr"
        )
    );
}

#[test]
fn every_timed_out_query_is_counted_though_a_storm_is_reported_in_few_findings() {
    let (registry, findings, _, _) = registry();
    let servers = Rc::new(RefCell::new(ServerLabels::new(MAX_SERVER_LABELS)));
    let mut sink = CountingSink::new(
        Box::new(TextSink::new(io::sink(), &Names::AsSent)),
        findings,
        servers,
    );
    let repeated = |count| {
        let Finding::Timeout(mut found) = a_timeout("10.96.0.10:53") else {
            unreachable!("a timeout")
        };
        found.count = count;
        Finding::Timeout(found)
    };
    let looping = |qname: &str, unanswered| {
        let Finding::Loop(mut found) = a_loop() else {
            unreachable!("a loop")
        };
        found.qname = qname.to_owned();
        found.unanswered = unanswered;
        Finding::Loop(found)
    };
    for finding in [
        repeated(1),
        repeated(37),
        // A loop's reports carry its unanswered queries so far: 0, then 500 more, then 20.
        looping("a.test.", 0),
        looping("a.test.", 500),
        looping("b.test.", 7),
        looping("a.test.", 520),
    ] {
        sink.finding(&finding).unwrap();
    }
    let text = exposition(&registry);
    let mut timeouts: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("dnsloop_timeouts_total"))
        .collect();
    timeouts.sort();
    assert_eq!(
        timeouts,
        [
            r#"dnsloop_timeouts_total{server="10.96.0.10:53"} 38"#,
            r#"dnsloop_timeouts_total{server="loop"} 527"#,
        ]
    );
}

#[test]
fn a_node_past_every_label_cap_serves_the_worst_case_of_the_series_formula() {
    // docs/operations.md's "Series per node" at its worst: 1,000 servers answering every rcode
    // and timing out, on 20 interfaces, with 3 drop reasons.
    const SERVERS: u16 = 1000;
    const INTERFACES: usize = 20;
    const DROP_REASONS: usize = 3;
    let server = |n: u16| SocketAddr::from(([10, 96, (n >> 8) as u8, n as u8], 53));
    let (registry, findings, _, snapshot) = registry();
    let labels = Rc::new(RefCell::new(ServerLabels::new(MAX_SERVER_LABELS)));
    let mut sink = CountingSink::new(
        Box::new(TextSink::new(io::sink(), &Names::AsSent)),
        findings,
        labels.clone(),
    );
    let mut looping = a_loop();
    if let Finding::Loop(found) = &mut looping {
        found.unanswered = 5;
    }
    sink.finding(&looping).unwrap();
    let mut every_rcode = ServerStats::ZERO;
    every_rcode.rcodes = [1; 16];
    every_rcode.truncated = 1;
    every_rcode.latency[bucket(1_000)] = 16;
    let answered = (0..SERVERS).map(|n| (server(n), every_rcode)).collect();
    for n in 0..SERVERS {
        let Finding::Timeout(mut timeout) = a_timeout(&server(n).to_string()) else {
            unreachable!("a timeout")
        };
        timeout.stale_conntrack = Some(ConntrackEvidence {
            original_dst: server(n),
            reply_src: address("10.244.0.3:53"),
            unreplied: false,
        });
        sink.finding(&Finding::Timeout(timeout)).unwrap();
        let Finding::TruncatedNotRetried(mut truncation) = a_truncation_not_retried(1) else {
            unreachable!("a truncation")
        };
        truncation.server = server(n);
        sink.finding(&Finding::TruncatedNotRetried(truncation))
            .unwrap();
        sink.finding(&a_search_list_waste(server(n))).unwrap();
        let Finding::FragmentedReplyLost(mut lost) = a_fragmented_reply_lost(1) else {
            unreachable!("a reply lost to fragmentation")
        };
        lost.server = server(n);
        sink.finding(&Finding::FragmentedReplyLost(lost)).unwrap();
    }
    let interfaces = (0..INTERFACES)
        .flat_map(|n| {
            [Direction::Ingress, Direction::Egress].map(|direction| PointCount {
                ifname: format!("veth{n}"),
                direction,
                packets: 1,
                dns_packets: 1,
            })
        })
        .collect();
    snapshot.replace(KernelSnapshot {
        interfaces,
        global: GlobalCounts::default(),
        servers: kernel::by_label(answered, &mut labels.borrow_mut()),
        drops: Some(
            ["NETFILTER_DROP", "SOCKET_RCVBUFF", "NO_SOCKET"]
                .map(|reason| (reason.into(), 1))
                .to_vec(),
        ),
        conntrack: Some(ConntrackStats {
            cpus: 2,
            insert_failed: 1,
            drop: 1,
            clashes_resolved: Some(1),
        }),
    });

    let text = exposition(&registry);
    let series = text.lines().filter(|line| !line.starts_with('#')).count();
    // Every server named that may be, and `other`; the timeouts also count `loop`.
    let server_labels = MAX_SERVER_LABELS + 1;
    let formula = 2 * (2 * INTERFACES)
        + Malformed::ALL.len()
        + DROP_REASONS
        + (server_labels + 1)
        + server_labels * 16
        + server_labels * 16
        + server_labels * 5
        + 3
        + 6;
    assert_eq!(series, formula, "{text}");
    assert_eq!(formula, 755, "docs/operations.md's worst case");
}

#[test]
fn what_the_kernel_lacks_is_one_series_per_feature() {
    let (registry, _, lacks, _) = registry();
    assert!(
        !exposition(&registry).contains("dnsloop_kernel_lacks{"),
        "no series while nothing is lacking"
    );
    lacks.note(&[Lack::Tcx, Lack::TcNetnsCookie]);
    let text = exposition(&registry);
    assert!(
        text.contains("dnsloop_kernel_lacks{feature=\"tcx\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("dnsloop_kernel_lacks{feature=\"tc_netns_cookie\"} 1\n"),
        "{text}"
    );
}
