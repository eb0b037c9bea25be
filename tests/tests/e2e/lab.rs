//! Every lab scenario does what it claims, shown with dig, tcpdump, conntrack and the DNS
//! servers' own logs. Each test brings up its own lab, one lab at a time.
use std::{collections::HashSet, path::Path};

use dnsloop_tests::lab::{
    self, Lab, Pod, Scenario, Server, CLUSTER_DNS, CLUSTER_DNS_V6, DEAD_DNS, EXTERNAL_A,
    EXTERNAL_AAAA, EXTERNAL_NAME, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, NODE_UPLINK, STUB_DOMAIN,
};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;

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
    match Lab::builder(scenario).start() {
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
    let Some(lab) = lab_up(test_name!(), Scenario::Healthy) else {
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
    let Some(lab) = lab_up(test_name!(), Scenario::NodelocalLoop) else {
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
    let Some(lab) = lab_up(test_name!(), Scenario::SelfLoop) else {
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
    let Some(lab) = lab_up(test_name!(), Scenario::UnexpectedSource) else {
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
    let Some(lab) = lab_up(test_name!(), Scenario::DeadUpstream) else {
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
    let Some(lab) = lab_up(test_name!(), Scenario::TcpLoop) else {
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
    if !host_can_run_labs(test_name!()) {
        return;
    }
    let prefix = format!("dlkept{}", std::process::id());
    Lab::builder(Scenario::DeadUpstream)
        .prefix(&prefix)
        .start()
        .or_fail("bringing up the lab to keep")
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
        Lab::builder(Scenario::Healthy)
            .prefix(&prefix)
            .start()
            .is_err(),
        "a second lab with the same prefix must be refused"
    );

    lab::down(&prefix).expect("down");
    assert_eq!(lab::status(&prefix).expect("status"), None);
    assert!(!Path::new(&format!("/var/run/netns/{prefix}-node")).exists());
    lab::down(&prefix).expect("down again is a no-op");
}

#[test]
fn dropping_a_lab_stops_its_servers_and_removes_its_namespaces() {
    let Some(lab) = lab_up(test_name!(), Scenario::Healthy) else {
        return;
    };
    let pids: Vec<u32> = Server::ALL
        .iter()
        .filter_map(|s| lab.server_pid(*s))
        .collect();
    assert_eq!(pids.len(), Scenario::Healthy.servers_on(0).len());
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

/// Brings `scenario` up on `nodes` nodes, or returns `None` when this host cannot run a lab.
fn cluster_up(test: &str, scenario: Scenario, nodes: usize) -> Option<Lab> {
    if !host_can_run_labs(test) {
        return None;
    }
    match Lab::builder(scenario).nodes(nodes).start() {
        Ok(lab) => Some(lab),
        Err(error) => panic!("{test}: {error:#}"),
    }
}

fn assert_answers_from(lab: &Lab, node: usize, server: &str, args: &[&str], expected: &str) {
    let outcome = lab
        .dig_from(node, Pod::Client, server, args)
        .or_fail(format_args!("dig @{server} {args:?} from node {node}"));
    assert_eq!(
        (outcome.status.as_deref(), outcome.answers.as_slice()),
        (Some("NOERROR"), [expected.to_owned()].as_slice()),
        "dig @{server} {args:?} from the client on node {node}:\n{}",
        outcome.stdout
    );
}

/// The lab's namespaces as `ip netns list` shows them now.
fn namespaces_of(prefix: &str) -> Vec<String> {
    let listing = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list runs");
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with(&format!("{prefix}-")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn cluster_healthy_resolves_from_node_1_through_a_coredns_pod_on_node_0_over_vxlan() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterHealthy, 2) else {
        return;
    };
    assert_eq!(
        lab.nodes(),
        Scenario::ClusterHealthy.default_nodes(),
        "two nodes by default"
    );
    let fabric = lab.fabric_ns().expect("two nodes have a fabric").to_owned();
    let underlay = lab
        .capture(
            &fabric,
            lab::UNDERLAY_BRIDGE,
            &format!("udp port {}", lab::VXLAN_PORT),
        )
        .expect("tcpdump starts");
    let node_cache = NODE_LOCAL_DNS.to_string();
    let cluster_dns = CLUSTER_DNS.to_string();
    let external_a = EXTERNAL_A.to_string();
    assert_answers_from(&lab, 1, &node_cache, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    assert_answers_from(&lab, 1, &node_cache, &[EXTERNAL_NAME], &external_a);
    assert_answers_from(&lab, 0, &node_cache, &[EXTERNAL_NAME], &external_a);
    // The ClusterIP picks the CoreDNS pods in turn: of a dozen queries, every other one reaches
    // node 0's.
    for _ in 0..12 {
        assert_answers_from(&lab, 1, &cluster_dns, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    }
    assert_answers_from(&lab, 1, &cluster_dns, &[EXTERNAL_NAME], &external_a);
    let packets = underlay.stop().expect("tcpdump stops");

    // tcpdump decodes VXLAN: the outer line (underlay addresses), then the inner packet.
    let coredns_on_node_0 = Pod::CoreDnsA.ip_on(0);
    let client_on_node_1 = Pod::Client.ip_on(1);
    let node_1_vtep = lab::node_underlay_on(1);
    let node_0_vtep = lab::node_underlay_on(0);
    let encapsulated = packets.windows(2).any(|pair| {
        pair[0].contains(&format!("{node_1_vtep}."))
            && pair[0].contains(&format!("> {node_0_vtep}.{}: VXLAN", lab::VXLAN_PORT))
            && pair[1].contains(&format!("{client_on_node_1}."))
            && pair[1].contains(&format!("> {coredns_on_node_0}.53:"))
    });
    assert!(
        encapsulated,
        "the client on node 1 should reach {coredns_on_node_0} on node 0 through VXLAN on the \
         underlay:\n{}",
        packets.join("\n")
    );
    assert!(
        packets.iter().all(|line| !line.contains(" > ")
            || line.contains(&format!(".{}: VXLAN", lab::VXLAN_PORT))
            || line.starts_with("IP 10.244.")),
        "the underlay carries encapsulated packets only:\n{}",
        packets.join("\n")
    );
    let log = lab.server_log_on(0, Server::CoreDnsA).expect("server log");
    assert!(
        log.contains(&format!("Packet from {client_on_node_1}:")),
        "dnsdist on node 0 should log the query of the client on node 1:\n{log}"
    );
}

#[test]
fn cluster_nodes_are_other_machines_to_each_other() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterHealthy, 3) else {
        return;
    };
    let nodes: Vec<String> = (0..lab.nodes())
        .map(|node| lab.node_ns_of(node).expect("node").to_owned())
        .collect();
    assert_eq!(nodes.len(), 3);
    for (index, node) in nodes.iter().enumerate() {
        let links = lab
            .exec(node, &["ip", "-d", "-o", "link", "show"])
            .expect("ip runs");
        let links = String::from_utf8_lossy(&links.stdout).into_owned();
        for other in nodes.iter().filter(|other| *other != node) {
            assert!(
                !links.contains(&format!("link-netns {other} ")),
                "{node} has a link into {other}:\n{links}"
            );
        }
        let uplink = links
            .lines()
            .find(|line| line.contains(&format!(": {}@", lab::UPLINK_DEVICE)))
            .or_fail(format_args!(
                "{node} has no {}:\n{links}",
                lab::UPLINK_DEVICE
            ));
        assert!(
            uplink.contains("macvlan") && !uplink.contains("veth"),
            "{node}'s uplink should be a macvlan, not a veth:\n{uplink}"
        );
        let overlay = links
            .lines()
            .find(|line| line.contains(&format!(": {}:", lab::OVERLAY_DEVICE)))
            .or_fail(format_args!(
                "{node} has no {}:\n{links}",
                lab::OVERLAY_DEVICE
            ));
        assert!(
            overlay.contains(&format!("dstport {}", lab::VXLAN_PORT)),
            "{overlay}"
        );
        // Every node resolves through its own cache, its own CoreDNS pod among the others'.
        assert_answers_from(
            &lab,
            index,
            &NODE_LOCAL_DNS.to_string(),
            &[CLUSTER_NAME],
            CLUSTER_NAME_ADDRESS,
        );
    }
    assert!(
        lab.pod_ns_on(1, Pod::CoreDnsB).is_err(),
        "node 1 runs no second CoreDNS pod"
    );
    assert!(lab.node_ns_of(3).is_err());
}

/// Lines of dnsdist's query log for `name`.
fn logged_queries(lab: &Lab, node: usize, server: Server, name: &str) -> usize {
    logged_ids(lab, node, server, name).len()
}

/// The ids of the queries for `name` in dnsdist's query log, one per line
/// (`[time] Packet from ADDRESS:PORT for NAME TYPE with id ID`).
fn logged_ids(lab: &Lab, node: usize, server: Server, name: &str) -> Vec<u16> {
    let question = format!(" for {name}. ");
    lab.server_log_on(node, server)
        .expect("server log")
        .lines()
        .filter(|line| line.contains(&question))
        .filter_map(|line| line.rsplit_once(" with id ")?.1.trim().parse().ok())
        .collect()
}

/// How many rounds a loop storm makes through the node caches before the tests call it one.
const STORM_ROUNDS: usize = 200;

#[test]
fn cluster_loop_circulates_between_nodes_until_the_servers_are_stopped() {
    let Some(mut lab) = cluster_up(test_name!(), Scenario::ClusterLoop, 2) else {
        return;
    };
    let overlay = lab
        .capture(lab.node_ns(), lab::OVERLAY_DEVICE, "udp dst port 53")
        .expect("tcpdump starts");
    let outcome = lab
        .dig_from(
            1,
            Pod::Client,
            &NODE_LOCAL_DNS.to_string(),
            &[EXTERNAL_NAME],
        )
        .expect("dig runs");
    assert_fails(&outcome);
    // The question goes round both nodes' caches hundreds of times, each time with a new id
    // (dnsdist numbers the queries it forwards), until the servers' budget ends the storm:
    // checked as soon as the caches' logs show it, whenever that is on this machine.
    dnsloop_tests::wait::until(std::time::Duration::from_secs(10), || {
        let ids: Vec<Vec<u16>> = (0..lab.nodes())
            .map(|node| logged_ids(&lab, node, Server::NodeCache, EXTERNAL_NAME))
            .collect();
        let distinct: HashSet<u16> = ids.iter().flatten().copied().collect();
        let per_node: Vec<usize> = ids.iter().map(Vec::len).collect();
        if distinct.len() >= STORM_ROUNDS && per_node.iter().all(|&queries| queries > 10) {
            Ok(())
        } else {
            Err(format!(
                "{} distinct ids among the node caches' queries ({per_node:?} per node)",
                distinct.len()
            ))
        }
    })
    .or_fail("expected the question to go round both nodes' caches with new ids");
    // Over node 0's vxlan0: queries from node 1 into node 0's CoreDNS pod, and from node 0 into
    // node 1's.
    wait_for_crossings(&overlay, 10);
    overlay.stop().expect("tcpdump stops");

    let stopping = std::time::Instant::now();
    lab.stop_servers();
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(3),
        "stopping the servers took {:?}",
        stopping.elapsed()
    );
    let fabric = lab.fabric_ns().expect("fabric").to_owned();
    let underlay = lab
        .capture(&fabric, lab::UNDERLAY_BRIDGE, "udp")
        .expect("tcpdump starts");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after: Vec<String> = underlay
        .stop()
        .expect("tcpdump stops")
        .into_iter()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert!(
        after.is_empty(),
        "nothing should cross the underlay once the servers are gone:\n{}",
        after.join("\n")
    );

    let prefix = lab.prefix().to_owned();
    drop(lab);
    assert_eq!(namespaces_of(&prefix), Vec::<String>::new());
}

#[test]
fn a_kept_cluster_lab_lists_every_node_and_goes_down_whole() {
    if !host_can_run_labs(test_name!()) {
        return;
    }
    let prefix = format!("dlnodes{}", std::process::id());
    Lab::builder(Scenario::ClusterLoop)
        .prefix(&prefix)
        .nodes(3)
        .start()
        .or_fail("bringing up the lab to keep")
        .keep();
    let _cleanup = DownOnDrop(&prefix);
    assert_eq!(namespaces_of(&prefix).len(), 3 * 3 + 2);

    let description = lab::status(&prefix)
        .expect("status")
        .expect("the kept lab is described");
    for expected in [
        "cluster-loop, 3 nodes",
        &format!("{prefix}-node "),
        &format!("{prefix}-node1 "),
        &format!("{prefix}-node2 "),
        &format!("{prefix}-coredns2a "),
        &format!("{prefix}-fabric "),
        "node 2: cni0 10.244.2.1/24",
        "10.244.2.0/24 via 10.244.2.0 dev vxlan0 onlink",
        "node2-node-cache (dnsdist",
        "node1-coredns-a (dnsdist",
    ] {
        assert!(
            description.contains(expected),
            "missing {expected}:\n{description}"
        );
    }
    assert!(!description.contains("not running"), "{description}");

    lab::down(&prefix).expect("down");
    assert_eq!(namespaces_of(&prefix), Vec::<String>::new());
    assert_eq!(lab::status(&prefix).expect("status"), None);
}

/// The queries for `name` that crossed node 0's overlay into node 0's CoreDNS pod (from node
/// 1) and out to node 1's (from node 0).
fn crossing_queries(packets: &[String], name: &str) -> (usize, usize) {
    let queries = queries_for(packets, name);
    let into = |node: usize| {
        let coredns = Pod::CoreDnsA.ip_on(node).to_string();
        queries.iter().filter(|q| q.destination == coredns).count()
    };
    (into(0), into(1))
}

/// Waits until `overlay`, a capture of node 0's vxlan0, holds at least `each_way` queries for
/// the looping name into node 0's CoreDNS pod and as many out to node 1's: the storm is seen
/// crossing whenever it does on this machine, not at a fixed time.
fn wait_for_crossings(overlay: &lab::Capture, each_way: usize) {
    overlay
        .wait_for(std::time::Duration::from_secs(10), |packets| {
            let (inbound, outbound) = crossing_queries(packets, EXTERNAL_NAME);
            if inbound >= each_way && outbound >= each_way {
                Ok(())
            } else {
                Err(format!(
                    "the loop should cross vxlan0 both ways ({inbound} in, {outbound} out)"
                ))
            }
        })
        .or_fail("waiting for the loop to cross vxlan0");
}

/// Stops every server and checks that no query for the looping name crosses the underlay
/// afterwards, then that dropping the lab leaves no namespace behind.
fn stop_and_check_quiet(mut lab: Lab) {
    let stopping = std::time::Instant::now();
    lab.stop_servers();
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(3),
        "stopping the servers took {:?}",
        stopping.elapsed()
    );
    let fabric = lab.fabric_ns().expect("fabric").to_owned();
    let underlay = lab
        .capture(&fabric, lab::UNDERLAY_BRIDGE, "udp")
        .expect("tcpdump starts");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = underlay.stop().expect("tcpdump stops");
    let queries = queries_for(&after, EXTERNAL_NAME);
    assert!(
        queries.is_empty(),
        "no query should cross the underlay once the servers are gone:\n{}",
        after.join("\n")
    );
    let prefix = lab.prefix().to_owned();
    drop(lab);
    assert_eq!(namespaces_of(&prefix), Vec::<String>::new());
}

#[test]
fn cluster_tcp_loop_crosses_the_overlay_over_tcp_until_the_servers_are_stopped() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterTcpLoop, 2) else {
        return;
    };
    assert_eq!(lab.nodes(), Scenario::ClusterTcpLoop.default_nodes());
    let overlay = lab
        .capture(lab.node_ns(), lab::OVERLAY_DEVICE, "port 53")
        .expect("tcpdump starts");
    let outcome = lab
        .dig_from(
            1,
            Pod::Client,
            &NODE_LOCAL_DNS.to_string(),
            &[EXTERNAL_NAME],
        )
        .expect("dig runs");
    assert_fails(&outcome);
    wait_for_crossings(&overlay, 3);
    let packets = overlay.stop().expect("tcpdump stops");

    // force_tcp: every query that crosses the overlay is on a TCP connection (tcpdump prints
    // TCP's flags before the DNS message), none in a UDP datagram.
    let over_udp: Vec<&String> = packets
        .iter()
        .filter(|line| line.contains(&format!("? {EXTERNAL_NAME}.")) && !line.contains("Flags ["))
        .collect();
    assert!(
        over_udp.is_empty(),
        "queries crossed the overlay over UDP:\n{}",
        over_udp
            .iter()
            .map(|line| line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    for node in 0..lab.nodes() {
        assert!(
            logged_queries(&lab, node, Server::NodeCache, EXTERNAL_NAME) > 3,
            "the loop should pass through node {node}'s cache"
        );
    }
    stop_and_check_quiet(lab);
}

#[test]
fn cluster_healthy_routed_resolves_from_every_node_with_calico_style_pods() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterHealthyRouted, 2) else {
        return;
    };
    assert_eq!(
        Scenario::ClusterHealthyRouted.pod_network(),
        lab::PodNetwork::Routed
    );
    for node in 0..lab.nodes() {
        let node_ns = lab.node_ns_of(node).expect("node").to_owned();
        let show = |argv: &[&str]| {
            let output = lab.exec(&node_ns, argv).expect("runs");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        let links = show(&["ip", "-o", "link", "show"]);
        assert!(!links.contains(": cni0:"), "no bridge for pods:\n{links}");
        let routes = show(&["ip", "-4", "route", "show"]);
        assert!(
            routes.contains(&format!("blackhole {}", lab::pod_cidr_on(node))),
            "{routes}"
        );
        for pod in lab.pods_on(node) {
            let veth = lab.pod_host_veth(node, pod).expect("veth");
            assert!(veth.starts_with("cali") && veth.len() <= 15, "{veth}");
            assert!(
                routes.contains(&format!("{} dev {veth} scope link", pod.ip_on(node))),
                "node {node} should route {} to {veth}:\n{routes}",
                pod.ip_on(node)
            );
            let proxy_arp = show(&["sysctl", "-n", &format!("net.ipv4.conf.{veth}.proxy_arp")]);
            assert_eq!(proxy_arp.trim(), "1", "proxy ARP on {veth}");
            let pod_ns = lab.pod_ns_on(node, pod).expect("pod");
            let pod_routes = lab
                .exec(&pod_ns, &["ip", "-4", "route", "show"])
                .expect("runs");
            let pod_routes = String::from_utf8_lossy(&pod_routes.stdout).into_owned();
            assert!(
                pod_routes.contains(&format!(
                    "default via {} dev eth0 onlink",
                    lab::ROUTED_POD_GATEWAY
                )),
                "{pod_routes}"
            );
            let addresses = lab
                .exec(&pod_ns, &["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
                .expect("runs");
            let addresses = String::from_utf8_lossy(&addresses.stdout).into_owned();
            assert!(
                addresses.contains(&format!("{}/32", pod.ip_on(node))),
                "{addresses}"
            );
        }
    }
    let node_cache = NODE_LOCAL_DNS.to_string();
    let external_a = EXTERNAL_A.to_string();
    for node in 0..lab.nodes() {
        assert_answers_from(
            &lab,
            node,
            &node_cache,
            &[CLUSTER_NAME],
            CLUSTER_NAME_ADDRESS,
        );
        assert_answers_from(&lab, node, &node_cache, &[EXTERNAL_NAME], &external_a);
        assert_answers_from(
            &lab,
            node,
            &NODE_LOCAL_DNS_V6.to_string(),
            &[CLUSTER_NAME],
            CLUSTER_NAME_ADDRESS,
        );
    }
    // The ClusterIP, DNATed to both nodes' CoreDNS pods in turn: of a dozen queries, every
    // other one reaches node 0's.
    for _ in 0..12 {
        assert_answers_from(
            &lab,
            1,
            &CLUSTER_DNS.to_string(),
            &[CLUSTER_NAME],
            CLUSTER_NAME_ADDRESS,
        );
    }
    let log = lab.server_log_on(0, Server::CoreDnsA).expect("server log");
    assert!(
        log.contains(&format!("Packet from {}:", Pod::Client.ip_on(1))),
        "node 0's CoreDNS pod should have answered node 1's client over the overlay:\n{log}"
    );
}

/// The loop of `EXTERNAL_NAME` crossed node 0's vxlan0 (captured as `packets`) both ways, and
/// passed through every node's cache.
fn assert_loop_crosses_both_nodes(lab: &Lab, packets: &[String]) {
    let (inbound, outbound) = crossing_queries(packets, EXTERNAL_NAME);
    assert!(
        inbound >= 10 && outbound >= 10,
        "the loop should cross vxlan0 both ways ({inbound} in, {outbound} out):\n{}",
        packets[..packets.len().min(40)].join("\n")
    );
    for node in 0..lab.nodes() {
        assert!(
            logged_queries(lab, node, Server::NodeCache, EXTERNAL_NAME) > 10,
            "the loop should pass through node {node}'s cache"
        );
    }
}

#[test]
fn cluster_loop_routed_circulates_between_nodes_without_a_bridge() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterLoopRouted, 2) else {
        return;
    };
    let node_cache = NODE_LOCAL_DNS.to_string();
    assert_answers_from(&lab, 1, &node_cache, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    let overlay = lab
        .capture(lab.node_ns(), lab::OVERLAY_DEVICE, "udp dst port 53")
        .expect("tcpdump starts");
    // The CoreDNS pods reach their node's cache through their cali veth: captured during the
    // same storm, which the servers' budget ends after about 3.5 s.
    let veth = lab.pod_host_veth(0, Pod::CoreDnsA).expect("veth");
    let pod_side = lab
        .capture(lab.node_ns(), &veth, "udp dst port 53")
        .expect("tcpdump starts");
    let outcome = lab
        .dig_from(1, Pod::Client, &node_cache, &[EXTERNAL_NAME])
        .expect("dig runs");
    assert_fails(&outcome);
    wait_for_crossings(&overlay, 10);
    let coredns = Pod::CoreDnsA.ip_on(0).to_string();
    let forwarded_to_the_cache = |packets: &[String]| {
        queries_for(packets, EXTERNAL_NAME)
            .iter()
            .any(|q| q.source == coredns && q.destination == node_cache)
    };
    pod_side
        .wait_for(std::time::Duration::from_secs(10), |packets| {
            if forwarded_to_the_cache(packets) {
                Ok(())
            } else {
                Err(format!(
                    "node 0's CoreDNS pod should forward to the node cache through {veth}"
                ))
            }
        })
        .or_fail("waiting for the forward to the node cache");
    let packets = overlay.stop().expect("tcpdump stops");
    let pod_packets = pod_side.stop().expect("tcpdump stops");

    assert_loop_crosses_both_nodes(&lab, &packets);
    assert!(forwarded_to_the_cache(&pod_packets));
    stop_and_check_quiet(lab);
}

#[test]
fn cluster_loop_iptables_keeps_pods_on_their_own_cache_and_loops_through_kube_dns_upstream() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterLoopIptables, 2) else {
        return;
    };
    let cluster_dns = CLUSTER_DNS.to_string();
    // A pod asking the kube-dns ClusterIP is answered by its own node's cache (NOTRACK: no
    // DNAT), which asks CoreDNS through kube-dns-upstream.
    assert_answers_from(&lab, 1, &cluster_dns, &[CLUSTER_NAME], CLUSTER_NAME_ADDRESS);
    let client = Pod::Client.ip_on(1);
    let cache_log = lab.server_log_on(1, Server::NodeCache).expect("server log");
    assert!(
        cache_log.contains(&format!("Packet from {client}:")),
        "node 1's cache should have received its client's query to {cluster_dns}:\n{cache_log}"
    );
    for node in 0..lab.nodes() {
        let coredns_log = lab
            .server_log_on(node, Server::CoreDnsA)
            .expect("server log");
        assert!(
            !coredns_log.contains(&format!("Packet from {client}:")),
            "no CoreDNS pod should get the client's query directly:\n{coredns_log}"
        );
    }
    let conntrack = |destination: &str| {
        let output = lab
            .exec(
                lab.node_ns_of(1).expect("node"),
                &["conntrack", "-L", "-p", "udp", "--orig-dst", destination],
            )
            .expect("conntrack runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let untracked = conntrack(&cluster_dns);
    assert!(
        untracked.trim().is_empty(),
        "NOTRACK: nothing to {cluster_dns} should be in conntrack:\n{untracked}"
    );
    let upstream_service = lab::CLUSTER_DNS_UPSTREAM.to_string();
    let dnat = conntrack(&upstream_service);
    assert!(
        dnat.contains(&format!("dst={upstream_service} ")),
        "the cache should reach CoreDNS through kube-dns-upstream:\n{dnat}"
    );

    let overlay = lab
        .capture(lab.node_ns(), lab::OVERLAY_DEVICE, "udp dst port 53")
        .expect("tcpdump starts");
    let outcome = lab
        .dig_from(1, Pod::Client, &cluster_dns, &[EXTERNAL_NAME])
        .expect("dig runs");
    assert_fails(&outcome);
    wait_for_crossings(&overlay, 10);
    let packets = overlay.stop().expect("tcpdump stops");
    assert_loop_crosses_both_nodes(&lab, &packets);
    stop_and_check_quiet(lab);
}

#[test]
fn cluster_upstream_is_knot_resolver_answering_from_its_own_data() {
    let Some(lab) = cluster_up(test_name!(), Scenario::ClusterHealthy, 2) else {
        return;
    };
    let node_cache = NODE_LOCAL_DNS.to_string();
    assert_answers_from(
        &lab,
        1,
        &node_cache,
        &[EXTERNAL_NAME],
        &EXTERNAL_A.to_string(),
    );
    assert_answers_from(
        &lab,
        1,
        &node_cache,
        &[EXTERNAL_NAME, "AAAA"],
        &EXTERNAL_AAAA.to_string(),
    );
    let missing = lab
        .dig_from(1, Pod::Client, &node_cache, &["missing.example.test"])
        .expect("dig runs");
    assert_eq!(
        missing.status.as_deref(),
        Some("NXDOMAIN"),
        "{}",
        missing.stdout
    );
    let log = lab.server_log(Server::Upstream).expect("server log");
    let asked = format!("query from {}#", lab::node_uplink_on(1));
    assert!(
        log.lines()
            .any(|line| line.starts_with(&asked)
                && line.ends_with(&format!(" for {EXTERNAL_NAME}. A"))),
        "kresd should log node 1's cache asking {EXTERNAL_NAME}:\n{log}"
    );
    let process = lab.server_pid(Server::Upstream).expect("upstream runs");
    let command = std::fs::read_to_string(format!("/proc/{process}/comm")).expect("comm");
    assert_eq!(command.trim(), "kresd");
}
