//! Every lab scenario does what it claims, shown with dig, tcpdump, conntrack and the DNS
//! servers' own logs. Each test brings up its own lab; they run in parallel.
use std::{collections::HashSet, path::Path};

use dnsloop_tests::lab::{
    self, Lab, Pod, Scenario, Server, CLUSTER_DNS, CLUSTER_DNS_V6, DEAD_DNS, EXTERNAL_A,
    EXTERNAL_AAAA, EXTERNAL_NAME, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, NODE_UPLINK, STUB_DOMAIN,
};

const CLUSTER_NAME: &str = "kubernetes.default.svc.cluster.local";
const CLUSTER_NAME_ADDRESS: &str = "10.96.0.1";

/// Whether this host can run a lab; if not, says why and returns `false`, or fails the test
/// under `CI=true`.
fn host_can_run_labs(test: &str) -> bool {
    let Err(why) = lab::check_host() else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|value| value == "true") {
        panic!("{test} cannot run: {why} (CI=true: privileged tests must run)");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Brings `scenario` up, or returns `None` when this host cannot run a lab.
fn lab_up(test: &str, scenario: Scenario) -> Option<Lab> {
    if !host_can_run_labs(test) {
        return None;
    }
    match Lab::up(scenario) {
        Ok(lab) => Some(lab),
        Err(error) => panic!("{test}: {error:#}"),
    }
}

fn assert_answers(lab: &Lab, server: &str, args: &[&str], expected: &str) {
    let outcome = lab.dig_or_fail(Pod::Client, server, args);
    assert_eq!(
        outcome.status.as_deref(),
        Some("NOERROR"),
        "dig @{server} {args:?}:\n{}",
        outcome.stdout
    );
    assert_eq!(
        outcome.answers,
        [expected],
        "dig @{server} {args:?}:\n{}",
        outcome.stdout
    );
}

/// The query failed: no answer at all, or an error code.
fn assert_fails(outcome: &lab::DigOutcome) {
    assert!(
        matches!(
            outcome.status.as_deref(),
            None | Some("SERVFAIL" | "REFUSED")
        ),
        "expected a timeout or SERVFAIL/REFUSED:\n{}",
        outcome.stdout
    );
}

/// A DNS query as tcpdump prints it, e.g.
/// `IP 10.244.0.3.40507 > 169.254.25.10.53: 58541+ [1au] A? www.example.test. (69)`
/// (TCP lines carry `Flags [P.], seq ..., length N` before the DNS part).
#[derive(Debug)]
struct Query {
    source: String,
    destination: String,
    id: u16,
}

/// The queries for `name` among tcpdump's lines (answers are left out: they have no `?`).
fn queries_for(packets: &[String], name: &str) -> Vec<Query> {
    let question = format!("{name}.");
    packets
        .iter()
        .filter_map(|line| {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let asks = tokens.iter().position(|t| t.ends_with('?'))?;
            if tokens.get(asks + 1) != Some(&question.as_str()) {
                return None;
            }
            let ip = tokens.iter().position(|t| *t == "IP" || *t == "IP6")?;
            let (source, _port) = tokens.get(ip + 1)?.rsplit_once('.')?;
            let (destination, _port) =
                tokens.get(ip + 3)?.trim_end_matches(':').rsplit_once('.')?;
            // The ID comes right before the question, past EDNS markers such as `[1au]`.
            let id = tokens[..asks]
                .iter()
                .rev()
                .find(|t| !t.starts_with('['))?
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()?;
            Some(Query {
                source: source.to_owned(),
                destination: destination.to_owned(),
                id,
            })
        })
        .collect()
}

fn is_coredns_pod(address: &str) -> bool {
    Pod::COREDNS
        .iter()
        .any(|pod| pod.ip().to_string() == address)
}

#[test]
fn healthy_resolves_cluster_and_external_names_over_udp_tcp_and_ipv6() {
    let Some(lab) = lab_up("healthy", Scenario::Healthy) else {
        return;
    };
    let servers = [
        NODE_LOCAL_DNS.to_string(),
        NODE_LOCAL_DNS_V6.to_string(),
        CLUSTER_DNS.to_string(),
        CLUSTER_DNS_V6.to_string(),
    ];
    for server in &servers {
        for transport in ["+notcp", "+tcp"] {
            assert_answers(
                &lab,
                server,
                &[transport, CLUSTER_NAME],
                CLUSTER_NAME_ADDRESS,
            );
            assert_answers(
                &lab,
                server,
                &[transport, EXTERNAL_NAME],
                &EXTERNAL_A.to_string(),
            );
        }
    }
    let node_cache = NODE_LOCAL_DNS.to_string();
    assert_answers(
        &lab,
        &node_cache,
        &[EXTERNAL_NAME, "AAAA"],
        &EXTERNAL_AAAA.to_string(),
    );
    let missing = lab.dig_or_fail(
        Pod::Client,
        &node_cache,
        &["missing.default.svc.cluster.local"],
    );
    assert_eq!(
        missing.status.as_deref(),
        Some("NXDOMAIN"),
        "{}",
        missing.stdout
    );
}

#[test]
fn nodelocal_loop_sends_external_names_back_into_the_node_cache() {
    let Some(lab) = lab_up("nodelocal-loop", Scenario::NodelocalLoop) else {
        return;
    };
    let node_cache = NODE_LOCAL_DNS.to_string();
    let capture = lab
        .capture(
            lab.node_ns(),
            "cni0",
            &format!("udp dst port 53 and dst host {node_cache}"),
        )
        .expect("tcpdump starts");
    let outcome = lab.dig_or_fail(Pod::Client, &node_cache, &[EXTERNAL_NAME]);
    let packets = capture.stop().expect("tcpdump stops");

    assert_fails(&outcome);
    // The client's query, then the same question again and again from the CoreDNS pods: the
    // cache sent it to the ClusterIP, the pod forwarded it back to the cache, each hop with a
    // new ID.
    let queries = queries_for(&packets, EXTERNAL_NAME);
    let reentries: Vec<&Query> = queries
        .iter()
        .filter(|q| is_coredns_pod(&q.source))
        .collect();
    let ids: HashSet<u16> = reentries.iter().map(|q| q.id).collect();
    assert!(
        reentries.len() >= 3 && ids.len() >= 3,
        "expected the query to re-enter the node cache several times:\n{}",
        packets.join("\n")
    );
    // Cluster names never leave CoreDNS, so they still resolve through the same cache.
    assert_answers(&lab, &node_cache, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
}

#[test]
fn self_loop_sends_the_query_to_the_same_server_over_lo() {
    let Some(lab) = lab_up("self-loop", Scenario::SelfLoop) else {
        return;
    };
    let pod = Pod::CoreDnsA;
    let capture = lab
        .capture(&lab.pod_ns(pod), "lo", "udp dst port 53")
        .expect("tcpdump starts");
    // dig waits one second, in which unbound re-sends the forwarded query to itself.
    let outcome = lab.dig_or_fail(Pod::Client, &pod.ip().to_string(), &[EXTERNAL_NAME]);
    let packets = capture.stop().expect("tcpdump stops");

    assert_fails(&outcome);
    let looped: Vec<Query> = queries_for(&packets, EXTERNAL_NAME)
        .into_iter()
        .filter(|q| q.source == "127.0.0.1" && q.destination == "127.0.0.1")
        .collect();
    assert!(
        looped.len() >= 2,
        "expected queries from the pod to itself over lo:\n{}",
        packets.join("\n")
    );
    let log = lab.server_log(Server::CoreDnsA).expect("server log");
    assert!(
        log.contains(&format!("127.0.0.1 {EXTERNAL_NAME}. A IN")),
        "unbound should log the query it received from itself:\n{log}"
    );
    assert_answers(
        &lab,
        &pod.ip().to_string(),
        &[CLUSTER_NAME],
        CLUSTER_NAME_ADDRESS,
    );
}

#[test]
fn unexpected_source_answers_from_the_pod_address_and_leaves_conntrack_unreplied() {
    let Some(lab) = lab_up("unexpected-source", Scenario::UnexpectedSource) else {
        return;
    };
    let client_ns = lab.pod_ns(Pod::Client);
    let capture = lab
        .capture(&client_ns, "eth0", "udp port 53")
        .expect("tcpdump starts");
    let outcome = lab.dig_or_fail(Pod::Client, &CLUSTER_DNS.to_string(), &[CLUSTER_NAME]);
    let packets = capture.stop().expect("tcpdump stops");

    assert_eq!(
        outcome.status, None,
        "the reply must not be accepted:\n{}",
        outcome.stdout
    );
    let client = Pod::Client.ip();
    let from_pod = packets.iter().any(|line| {
        Pod::COREDNS
            .iter()
            .any(|pod| line.contains(&format!("IP {}.53 > {client}.", pod.ip())))
    });
    let from_service = packets
        .iter()
        .any(|line| line.contains(&format!("IP {CLUSTER_DNS}.53 > ")));
    assert!(
        from_pod && !from_service,
        "the reply should come from the CoreDNS pod's address, not the ClusterIP:\n{}",
        packets.join("\n")
    );
    let conntrack = lab
        .exec(
            lab.node_ns(),
            &[
                "conntrack",
                "-L",
                "-p",
                "udp",
                "--orig-dst",
                &CLUSTER_DNS.to_string(),
            ],
        )
        .expect("conntrack runs");
    let entries = String::from_utf8_lossy(&conntrack.stdout);
    assert!(
        entries
            .lines()
            .any(|entry| entry.contains(&format!("src={client} ")) && entry.contains("[UNREPLIED]")),
        "conntrack should never see the reply:\n{entries}"
    );
    // The pod itself answers, and so does the node cache: its queries to the ClusterIP leave
    // the node through the output chain and the replies are routed, not bridged.
    assert_answers(
        &lab,
        &Pod::CoreDnsA.ip().to_string(),
        &[CLUSTER_NAME],
        CLUSTER_NAME_ADDRESS,
    );
    assert_answers(
        &lab,
        &NODE_LOCAL_DNS.to_string(),
        &[CLUSTER_NAME],
        CLUSTER_NAME_ADDRESS,
    );
}

#[test]
fn dead_upstream_times_out_the_stub_domain_only() {
    let Some(lab) = lab_up("dead-upstream", Scenario::DeadUpstream) else {
        return;
    };
    let stub_name = format!("www.{STUB_DOMAIN}");
    for server in [CLUSTER_DNS.to_string(), NODE_LOCAL_DNS.to_string()] {
        assert_fails(&lab.dig_or_fail(Pod::Client, &server, &[&stub_name]));
        assert_answers(&lab, &server, &[EXTERNAL_NAME], &EXTERNAL_A.to_string());
        assert_answers(&lab, &server, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    }
    let forwarded = format!("forwarded {stub_name} to {DEAD_DNS}");
    let logs: Vec<String> = [Server::CoreDnsA, Server::CoreDnsB]
        .into_iter()
        .map(|server| lab.server_log(server).expect("server log"))
        .collect();
    assert!(
        logs.iter().any(|log| log.contains(&forwarded)),
        "a CoreDNS pod should have forwarded the stub domain to {DEAD_DNS}:\n{}",
        logs.join("\n")
    );
}

#[test]
fn tcp_loop_forwards_over_tcp_to_the_cluster_ip_and_back_into_the_node_cache() {
    let Some(lab) = lab_up("tcp-loop", Scenario::TcpLoop) else {
        return;
    };
    let node_cache = NODE_LOCAL_DNS.to_string();
    // Cluster names make the same trip over TCP but CoreDNS answers them. (Asked first: once
    // the loop runs, CoreDNS is stuck on the looping query on the connection unbound reuses,
    // so the cache's next queries wait behind it.)
    assert_answers(&lab, &node_cache, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    let capture = lab
        .capture(lab.node_ns(), "cni0", "tcp port 53")
        .expect("tcpdump starts");
    let outcome = lab.dig_or_fail(Pod::Client, &node_cache, &[EXTERNAL_NAME]);
    let packets = capture.stop().expect("tcpdump stops");

    assert_fails(&outcome);
    // Over TCP: node cache -> ClusterIP (DNATed on the way out, so tcpdump sees the pod's
    // address) and CoreDNS pod -> node cache.
    let queries = queries_for(&packets, EXTERNAL_NAME);
    let to_coredns = queries
        .iter()
        .any(|q| q.source == NODE_UPLINK.to_string() && is_coredns_pod(&q.destination));
    let back_to_cache = queries
        .iter()
        .any(|q| is_coredns_pod(&q.source) && q.destination == node_cache);
    assert!(
        to_coredns && back_to_cache,
        "expected TCP queries cache -> CoreDNS -> cache:\n{}",
        packets.join("\n")
    );
    let conntrack = lab
        .exec(
            lab.node_ns(),
            &[
                "conntrack",
                "-L",
                "-p",
                "tcp",
                "--orig-dst",
                &CLUSTER_DNS.to_string(),
                "--orig-port-dst",
                "53",
            ],
        )
        .expect("conntrack runs");
    let entries = String::from_utf8_lossy(&conntrack.stdout);
    assert!(
        entries.contains(&format!("dst={CLUSTER_DNS} ")),
        "the node cache should have connected to the ClusterIP over TCP:\n{entries}"
    );
    let log = lab.server_log(Server::NodeCache).expect("server log");
    assert!(
        Pod::COREDNS
            .iter()
            .any(|pod| log.contains(&format!("{} {EXTERNAL_NAME}. A IN", pod.ip()))),
        "unbound should log the query coming back from a CoreDNS pod:\n{log}"
    );
}

/// Takes a kept lab down even when an assertion fails first.
struct DownOnDrop<'a>(&'a str);

impl Drop for DownOnDrop<'_> {
    fn drop(&mut self) {
        let _ = lab::down(self.0);
    }
}

#[test]
fn a_kept_lab_is_described_and_taken_down_by_prefix() {
    if !host_can_run_labs("kept-lab") {
        return;
    }
    let prefix = format!("dlkept{}", std::process::id());
    Lab::up_with_prefix(&prefix, Scenario::DeadUpstream)
        .unwrap_or_else(|error| panic!("{error:#}"))
        .keep();
    let _cleanup = DownOnDrop(&prefix);

    let description = lab::status(&prefix)
        .expect("status")
        .expect("the kept lab is described");
    for expected in [
        "dead-upstream",
        &format!("{prefix}-node"),
        &DEAD_DNS.to_string(),
        "node-cache",
    ] {
        assert!(
            description.contains(expected),
            "missing {expected}:\n{description}"
        );
    }
    assert!(!description.contains("not running"), "{description}");
    assert!(
        Lab::up_with_prefix(&prefix, Scenario::Healthy).is_err(),
        "a second lab with the same prefix must be refused"
    );

    lab::down(&prefix).expect("down");
    assert_eq!(lab::status(&prefix).expect("status"), None);
    assert!(!Path::new(&format!("/var/run/netns/{prefix}-node")).exists());
    lab::down(&prefix).expect("down again is a no-op");
}

#[test]
fn dropping_a_lab_stops_its_servers_and_removes_its_namespaces() {
    let Some(lab) = lab_up("drop", Scenario::Healthy) else {
        return;
    };
    let pids: Vec<u32> = Server::ALL
        .iter()
        .filter_map(|s| lab.server_pid(*s))
        .collect();
    assert_eq!(pids.len(), Server::ALL.len());
    let namespaces: Vec<_> = [lab.node_ns().to_owned(), lab.upstream_ns().to_owned()]
        .into_iter()
        .chain(Pod::ALL.map(|pod| lab.pod_ns(pod)))
        .map(|ns| lab.netns_path(&ns))
        .collect();
    let state_dir = lab.state_dir();
    assert!(namespaces.iter().all(|ns| ns.exists()) && state_dir.exists());

    drop(lab);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} survived"
        );
    }
    for ns in namespaces {
        assert!(!ns.exists(), "{} survived", ns.display());
    }
    assert!(!state_dir.exists(), "{} survived", state_dir.display());
}
