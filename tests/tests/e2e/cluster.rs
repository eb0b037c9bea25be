//! dnsloop on a cluster: loops through other nodes, found by the tracer of every node they
//! cross, and no loop where clients on several nodes merely ask the same names.
//!
//! Each test brings up a multi-node lab (nodes joined by a VXLAN overlay, dnsdist forwarding
//! like CoreDNS) and runs `dnsloop trace --output json` in every node's namespace, each with
//! its own `NODE_NAME`, as a DaemonSet would.
use std::{
    net::SocketAddr,
    path::Path,
    thread,
    time::{Duration, SystemTime},
};

use dnsloop_core::schema::{LoopRecord, Record, Timestamp};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    dns_query,
    findings::{fqdn, SummaryExt as _, Trace},
    lab::{
        Lab, Pod, Scenario, CLUSTER_DNS, DEAD_DNS, EXTERNAL_NAME, NODE_LOCAL_DNS, OVERLAY_DEVICE,
        STUB_DOMAIN,
    },
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};

const CLUSTER_NAME: &str = "kubernetes.default.svc.cluster.local";
/// A pod's search list in the `default` namespace.
const SEARCH_LIST: [&str; 3] = [
    "default.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
];
/// A loop through other nodes is reported within 1 s of the question's second return; the lab's
/// rounds over UDP take milliseconds.
const LOOP_REPORTED_WITHIN: Duration = Duration::from_secs(1);
/// How many times each no-false-loop case sends its traffic.
const ROUNDS: usize = 3;
/// How many clients on another node ask a pod the same name at once.
const OTHER_NODE_CLIENTS: usize = 3;

/// Brings up `scenario` on `nodes` nodes and traces every node while `traffic` runs, the tracer
/// of node `node` given `node_args(node)` besides `--output json`; returns each node's trace,
/// node 0 first. `traffic` starts once every tracer is attached, and is given them, node 0
/// first, to wait for what they report. `None` when this host cannot run the test (it fails
/// instead under `CI=true`).
pub(crate) fn traced_cluster_with(
    test: &str,
    scenario: Scenario,
    nodes: usize,
    node_args: impl Fn(usize) -> Vec<String>,
    traffic: impl FnOnce(&mut Lab, &mut [Tracer]),
) -> Option<Vec<Trace>> {
    let observed = observed_cluster(test, scenario, nodes, false, node_args, traffic)?;
    Some(observed.into_iter().map(|(trace, _)| trace).collect())
}

/// As `traced_cluster_with`, no option added, with tcpdump capturing every interface of every node at the same time
/// (DNS and ICMP, as an operator would); returns each node's trace and `dnsloop analyze` of its
/// capture.
fn traced_and_captured_cluster(
    test: &str,
    scenario: Scenario,
    nodes: usize,
    traffic: impl FnOnce(&mut Lab, &mut [Tracer]),
) -> Option<Vec<(Trace, Trace)>> {
    let observed = observed_cluster(test, scenario, nodes, true, |_| Vec::new(), traffic)?;
    Some(
        observed
            .into_iter()
            .map(|(trace, analysed)| (trace, analysed.expect("every node captured")))
            .collect(),
    )
}

fn observed_cluster(
    test: &str,
    scenario: Scenario,
    nodes: usize,
    captured: bool,
    node_args: impl Fn(usize) -> Vec<String>,
    traffic: impl FnOnce(&mut Lab, &mut [Tracer]),
) -> Option<Vec<(Trace, Option<Trace>)>> {
    let mut needs = vec![Need::Root, Need::DnsloopBinary];
    if captured {
        needs.push(Need::Tool("tcpdump"));
    }
    if !can_run(test, &needs) {
        return None;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let mut lab = Lab::builder(scenario).nodes(nodes).start().or_fail(test);
    let captures: Vec<_> = (0..nodes)
        .filter(|_| captured)
        .map(|node| {
            let namespace = lab.node_ns_of(node).expect("a node of the lab");
            let file = files.path().join(format!("node{node}-any.pcap"));
            lab.capture_pcap(namespace, "any", "port 53 or icmp or icmp6", &file)
                .map(|capture| (capture, file))
                .or_fail(format_args!("{test}: capture on node {node}"))
        })
        .collect();
    let mut tracers: Vec<Tracer> = (0..nodes)
        .map(|node| {
            let namespace = lab.node_ns_of(node).expect("a node of the lab");
            let name = node_name(node);
            let extra = node_args(node);
            let args: Vec<&str> = ["--output", "json"]
                .into_iter()
                .chain(extra.iter().map(String::as_str))
                .collect();
            Tracer::start_with_env(
                &dnsloop_bin(),
                &lab,
                namespace,
                &args,
                &[("NODE_NAME", name.as_str())],
            )
            .or_fail(format_args!("{test}: tracer on node {node}"))
        })
        .collect();
    traffic(&mut lab, &mut tracers);
    let traces = tracers.into_iter().map(|tracer| {
        let output = tracer.interrupt().or_fail(test);
        Trace::from_output(output).or_fail(test)
    });
    let mut analysed: Vec<Option<Trace>> = Vec::new();
    for (node, (capture, file)) in captures.into_iter().enumerate() {
        capture.stop_complete().or_fail(test);
        analysed.push(Some(analyze_node_capture(&lab, node, &file)));
    }
    analysed.resize_with(nodes, || None);
    Some(traces.zip(analysed).collect())
}

/// `dnsloop analyze` of node `node`'s capture in `file`, named as its tracer names the node.
fn analyze_node_capture(lab: &Lab, node: usize, file: &Path) -> Trace {
    // A cooked v2 capture numbers its interfaces: `ip -o link` names them.
    let namespace = lab.node_ns_of(node).expect("a node of the lab");
    let ip_link = lab
        .exec(namespace, &["ip", "-o", "link"])
        .or_fail(format_args!("ip -o link on node {node}"));
    let links = file.with_extension("links");
    std::fs::write(&links, &ip_link.stdout).expect("writing the interface names");
    let links = links.to_str().expect("a UTF-8 path");
    let name = node_name(node);
    tracer::analyze(&dnsloop_bin(), file, &["--node", &name, "--links", links])
        .and_then(Trace::from_output)
        .or_fail(format_args!("dnsloop analyze of node {node}'s capture"))
}

/// The client on `node` asks `server` for `name`, and gets an answer (NOERROR).
fn client_gets_an_answer(lab: &Lab, node: usize, server: &str, name: &str) {
    let outcome = lab
        .dig_from(node, Pod::Client, server, &[name])
        .or_fail(format_args!("dig @{server} {name} from node {node}"));
    assert_eq!(
        outcome.status.as_deref(),
        Some("NOERROR"),
        "node {node} @{server} {name}:\n{}",
        outcome.stdout
    );
}

/// No loop, nor a possible one, on any node, live or in its capture.
fn assert_no_loop_traced_or_captured(observed: &[(Trace, Trace)]) {
    for (node, (trace, analysed)) in observed.iter().enumerate() {
        trace.assert_no_loop(&format!("node {node}, trace"));
        analysed.assert_no_loop(&format!("node {node}, analyze of a capture"));
    }
}

fn node_name(node: usize) -> String {
    format!("lab-node-{node}")
}

#[test]
fn a_loop_through_two_nodes_is_reported_by_each_nodes_tracer_with_one_loop_id() {
    loop_through_two_nodes(test_name!(), Scenario::ClusterLoop, UDP_STORM);
}

#[test]
fn a_loop_through_two_nodes_over_tcp_is_reported_by_each_node() {
    // node-local-dns with `force_tcp`: every forward of the caches is a TCP connection.
    loop_through_two_nodes(test_name!(), Scenario::ClusterTcpLoop, TCP_STORM);
}

#[test]
fn a_loop_through_two_nodes_with_routed_pods_is_reported_by_each_node() {
    // Calico-style: cali* veths, /32 routes, no bridge.
    loop_through_two_nodes(test_name!(), Scenario::ClusterLoopRouted, UDP_STORM);
}

#[test]
fn a_loop_through_node_local_dns_in_iptables_mode_is_reported_by_each_node() {
    // The caches also bind the kube-dns ClusterIP (NOTRACK) and forward to kube-dns-upstream.
    loop_through_two_nodes(test_name!(), Scenario::ClusterLoopIptables, UDP_STORM);
}

/// By when each node must have seen the question go round through the other node twice, and
/// how long the test waits for each node's report before it gives up. Over UDP the lab's loop
/// goes round thousands of times a second; over TCP each hop opens a connection, so rounds are
/// fewer, and which CoreDNS pod each forward's DNAT picks decides when the question first
/// crosses to the other node and back.
pub(crate) struct Storm {
    crossed_twice_within: Duration,
    reported_by: Duration,
}

pub(crate) const UDP_STORM: Storm = Storm {
    crossed_twice_within: LOOP_REPORTED_WITHIN,
    reported_by: Duration::from_secs(15),
};
const TCP_STORM: Storm = Storm {
    crossed_twice_within: Duration::from_secs(4),
    reported_by: Duration::from_secs(20),
};

/// Whether `record` reports a loop of `qname` through other nodes.
fn is_loop_through_other_nodes(record: &Record, qname: &str) -> bool {
    matches!(record, Record::Loop(found) if found.qname == qname && !found.off_node.is_empty())
}

/// Starts `scenario`'s loop on two nodes (a client on node 1 asks its cache an external name),
/// stops the servers once every node's tracer has reported it, and checks that each reported
/// it as a loop through other nodes, in time, with one `loop_id` on both nodes and a few
/// findings for the storm.
fn loop_through_two_nodes(test: &str, scenario: Scenario, storm: Storm) {
    loop_through_two_nodes_traced(test, scenario, storm, |_| Vec::new(), &fqdn(EXTERNAL_NAME));
}

/// As `loop_through_two_nodes`, the tracer of node `node` given `node_args(node)`, which name
/// the question `qname`; returns each node's trace, node 0 first, once checked.
pub(crate) fn loop_through_two_nodes_traced(
    test: &str,
    scenario: Scenario,
    storm: Storm,
    node_args: impl Fn(usize) -> Vec<String>,
    qname: &str,
) -> Option<Vec<Trace>> {
    let mut asked = None;
    let traces = traced_cluster_with(test, scenario, 2, node_args, |lab, tracers| {
        asked = Some(Timestamp(SystemTime::now()));
        // The client on node 1 asks its cache: the question goes round both nodes' caches
        // and CoreDNS pods until the servers' storm budget ends it, or they are stopped.
        let _ = lab.dig_from(
            1,
            Pod::Client,
            &NODE_LOCAL_DNS.to_string(),
            &[EXTERNAL_NAME],
        );
        for (node, tracer) in tracers.iter_mut().enumerate() {
            if let Err(error) = tracer.wait_for_record(storm.reported_by, |record| {
                is_loop_through_other_nodes(record, qname)
            }) {
                panic!("{test}: node {node}: no loop through other nodes for {qname}: {error:#}");
            }
        }
        lab.stop_servers();
    })?;
    let asked = asked.expect("the traffic ran");
    let mut loop_ids = Vec::new();
    for (node, trace) in traces.iter().enumerate() {
        let loops = trace.loops_for(qname);
        let Some(first) = loops.iter().find(|found| !found.off_node.is_empty()) else {
            panic!(
                "node {node}: no loop through other nodes for {qname}\n{}{}",
                trace.stdout, trace.stderr
            );
        };
        // What left over the overlay and came back over it; only the hops seen here.
        let off_node = &first.off_node[0];
        assert_eq!(
            (off_node.left_via.as_str(), off_node.back_via.as_str()),
            (OVERLAY_DEVICE, OVERLAY_DEVICE),
            "node {node}: {first:?}"
        );
        assert!(
            first.summary.contains("(off the node) ... back from"),
            "node {node}: {}",
            first.summary
        );
        assert!(first.count >= 2, "node {node}: {first:?}");
        assert!(
            first.ts.since(asked) <= storm.crossed_twice_within,
            "node {node}: reported {:?} after the question was asked",
            first.ts.since(asked)
        );
        assert_eq!(first.node, node_name(node));
        // One loop, whatever ids, ports and rounds each node saw.
        assert!(loops.iter().all(|found| found.loop_id == first.loop_id));
        loop_ids.push(first.loop_id.clone());
        // A storm of thousands of rounds stays a few reports: the loop's, each kind once and
        // again at the end, and its unanswered forwards counted in them, not printed.
        assert!(
            loops.len() <= 6,
            "node {node}: {} loop reports for one loop\n{}",
            loops.len(),
            trace.stdout
        );
        let findings =
            trace.loops().len() + trace.timeouts().len() + trace.unexpected_sources().len();
        assert!(
            findings <= 10,
            "node {node}: {findings} findings for one loop storm\n{}",
            trace.stdout
        );
    }
    assert_eq!(
        loop_ids[0], loop_ids[1],
        "one loop, one loop_id on both nodes"
    );
    Some(traces)
}

/// glibc's pairs of A and AAAA each client sends at once in
/// `a_and_aaaa_asked_at_once_on_one_socket_from_both_nodes_are_no_loop`.
const GLIBC_PAIRS: u16 = 20;

#[test]
fn a_and_aaaa_asked_at_once_on_one_socket_from_both_nodes_are_no_loop() {
    // glibc asks A and AAAA back to back from one socket; CoreDNS-like servers forward each on
    // its own. Both nodes' clients do so at the same time, through the ClusterIP (DNAT'ed to
    // the CoreDNS pods in turn) and through their node caches.
    let Some(observed) =
        traced_and_captured_cluster(test_name!(), Scenario::ClusterHealthy, 2, |lab, _| {
            let lab = &*lab;
            thread::scope(|scope| {
                for node in 0..2 {
                    scope.spawn(move || {
                        let client = lab.netns_path(
                            &lab.pod_ns_on(node, Pod::Client)
                                .expect("a client on every node"),
                        );
                        for pair in 0..GLIBC_PAIRS {
                            for server in [CLUSTER_DNS, NODE_LOCAL_DNS] {
                                let answered = dns_query::send_a_and_aaaa(
                                    &client,
                                    SocketAddr::new(server.into(), 53),
                                    EXTERNAL_NAME,
                                    pair * 2,
                                )
                                .expect("queries sent");
                                assert_eq!(
                                    answered, 2,
                                    "node {node} @{server}: A and AAAA answered"
                                );
                            }
                        }
                    });
                }
            });
        })
    else {
        return;
    };
    for (node, (trace, analysed)) in observed.iter().enumerate() {
        for (how, trace) in [("trace", trace), ("analyze of a capture", analysed)] {
            trace.assert_no_loop(&format!("node {node}, {how}"));
            assert!(
                trace.unexpected_sources().is_empty() && trace.timeouts().is_empty(),
                "node {node}, {how}: every query answered from where it went\n{trace}"
            );
        }
    }
}

#[test]
fn clients_on_two_nodes_asking_the_same_names_at_once_are_no_loop() {
    let Some(observed) =
        traced_and_captured_cluster(test_name!(), Scenario::ClusterHealthy, 2, |lab, _| {
            // Three times over, both nodes' clients ask at the same moment: an external name
            // through their caches, a cluster name through the ClusterIP (DNAT'ed to CoreDNS on
            // either node) and directly to the other node's CoreDNS pod.
            let lab = &*lab;
            for _ in 0..3 {
                thread::scope(|scope| {
                    for node in 0..2 {
                        scope.spawn(move || {
                            let other = 1 - node;
                            let coredns_there = lab
                                .pods_on(other)
                                .into_iter()
                                .find(|pod| *pod != Pod::Client)
                                .expect("a CoreDNS pod on every node")
                                .ip_on(other)
                                .to_string();
                            // A pod's resolver with ndots:5 tries the search list first.
                            for suffix in SEARCH_LIST {
                                let _ = lab.dig_from(
                                    node,
                                    Pod::Client,
                                    &NODE_LOCAL_DNS.to_string(),
                                    &[&format!("{EXTERNAL_NAME}.{suffix}")],
                                );
                            }
                            for (server, name) in [
                                (NODE_LOCAL_DNS.to_string(), EXTERNAL_NAME),
                                (CLUSTER_DNS.to_string(), CLUSTER_NAME),
                                (coredns_there, EXTERNAL_NAME),
                            ] {
                                client_gets_an_answer(lab, node, &server, name);
                            }
                        });
                    }
                });
            }
        })
    else {
        return;
    };
    assert_no_loop_traced_or_captured(&observed);
    for (node, (trace, _)) in observed.iter().enumerate() {
        let overlay = trace.summary().dns_packets(OVERLAY_DEVICE, "ingress")
            + trace.summary().dns_packets(OVERLAY_DEVICE, "egress");
        assert!(
            overlay > 0,
            "node {node}: no DNS crossed the overlay\n{trace}"
        );
    }
}

#[test]
fn analyze_finds_the_loop_through_other_nodes_in_one_nodes_capture_with_or_without_names() {
    let test = test_name!();
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tcpdump"), Need::DnsloopBinary],
    ) {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let file = files.path().join("node0-any.pcap");
    let overlay_file = files.path().join("node0-overlay.pcap");
    let links = files.path().join("node0-links.txt");
    let live = {
        let mut lab = Lab::builder(Scenario::ClusterLoop)
            .nodes(2)
            .start()
            .or_fail(test);
        let node = lab.node_ns_of(0).expect("node 0").to_owned();
        // As an operator on node A would take it: every interface, DNS only; and the overlay
        // alone, which shows the loop's storm but not its path.
        let capture = lab
            .capture_pcap(&node, "any", "port 53", &file)
            .or_fail(test);
        let overlay_capture = lab
            .capture_pcap(&node, OVERLAY_DEVICE, "port 53", &overlay_file)
            .or_fail(test);
        let mut tracer =
            Tracer::start(&dnsloop_bin(), &lab, &node, &["--output", "json"]).or_fail(test);
        let _ = lab.dig_from(
            1,
            Pod::Client,
            &NODE_LOCAL_DNS.to_string(),
            &[EXTERNAL_NAME],
        );
        // The capture holds the loop once the tracer beside it has seen it.
        let qname = fqdn(EXTERNAL_NAME);
        tracer
            .wait_for_record(UDP_STORM.reported_by, |record| {
                is_loop_through_other_nodes(record, &qname)
            })
            .or_fail(test);
        lab.stop_servers();
        capture.stop().expect("tcpdump stops");
        overlay_capture.stop().expect("tcpdump stops");
        let output = tracer.interrupt().expect("the tracer stops");
        // A cooked v2 capture numbers its interfaces: `ip -o link` names them.
        let ip_link = lab.exec(&node, &["ip", "-o", "link"]).or_fail(test);
        std::fs::write(&links, &ip_link.stdout).expect("writing the interface names");
        Trace::from_output(output).or_fail(test)
    };
    let links = links.to_str().expect("a UTF-8 path");
    let qname = fqdn(EXTERNAL_NAME);
    let through_other_nodes = |found: Vec<&LoopRecord>| {
        found
            .into_iter()
            .find(|found| !found.off_node.is_empty())
            .cloned()
    };
    let live = through_other_nodes(live.loops_for(&qname)).or_fail(format_args!(
        "no loop through other nodes for {qname}\n{live}"
    ));
    // With the interfaces' names, and without: the capture itself shows which interface leads
    // to other nodes, and, holding every interface of the node, that the node took in what
    // entered it and never left.
    for (how, extra) in [
        ("with --links", &["--links", links][..]),
        ("from the capture alone", &[][..]),
    ] {
        let args = [&["--node", "node-a"][..], extra].concat();
        let analyzed = tracer::analyze(&dnsloop_bin(), &file, &args)
            .and_then(Trace::from_output)
            .or_fail(format_args!("dnsloop analyze {how}"));
        let offline = through_other_nodes(analyzed.loops_for(&qname)).or_fail(format_args!(
            "{how}: no loop through other nodes for {qname}\n{analyzed}"
        ));
        assert_eq!(
            offline.loop_id, live.loop_id,
            "{how}: the same loop, live and offline"
        );
        assert_eq!(offline.node, "node-a");
        let off_node = &offline.off_node[0];
        if extra.is_empty() {
            // A cooked capture numbers the interfaces it does not name.
            assert!(
                off_node.left_via.starts_with("ifindex "),
                "{how}: {off_node:?}"
            );
        } else {
            assert_eq!(off_node.left_via, OVERLAY_DEVICE, "{how}");
        }
        assert_eq!(off_node.back_via, off_node.left_via, "{how}");
    }
    // The overlay alone cannot show the path: the storm across it is a possible loop.
    let analyzed = tracer::analyze(&dnsloop_bin(), &overlay_file, &["--node", "node-a"])
        .and_then(Trace::from_output)
        .or_fail("dnsloop analyze of the overlay's capture");
    let storm = analyzed
        .possible_loops_for(&qname)
        .into_iter()
        .find(|found| {
            found
                .unconfirmed
                .iter()
                .any(|gap| gap.why == "path_not_shown")
        })
        .or_fail(format_args!(
            "no possible loop out of sight for {qname}\n{analyzed}"
        ));
    assert_eq!(storm.loop_id, live.loop_id, "the same question");
    assert!(analyzed.loops().is_empty(), "no path, no loop:\n{analyzed}");
}

#[test]
fn other_nodes_asking_a_pod_what_it_forwards_to_a_dead_upstream_is_no_loop() {
    // dead-upstream: CoreDNS forwards the stub domain to a server that never answers. The
    // client on node 0 asks CoreDNS pod A a stub name; at the same moments clients on node 1
    // ask pod A the same name over the overlay, retrying (dig's own retries, new ids), so pod A
    // forwards it again and again while every forward is unanswered. Several rounds, as every
    // no-false-loop case: a false loop may need a later round's forward to meet an earlier one.
    let name = format!("db.{STUB_DOMAIN}");
    let coredns_a = Pod::CoreDnsA.ip().to_string();
    let Some(observed) =
        traced_and_captured_cluster(test_name!(), Scenario::DeadUpstream, 2, |lab, _| {
            let lab = &*lab;
            for _ in 0..ROUNDS {
                thread::scope(|scope| {
                    scope.spawn(|| {
                        let _ = lab.dig_from(0, Pod::Client, &coredns_a, &[&name]);
                    });
                    for _ in 0..OTHER_NODE_CLIENTS {
                        scope.spawn(|| {
                            let _ = lab.dig_from(1, Pod::Client, &coredns_a, &["+tries=3", &name]);
                        });
                    }
                });
            }
        })
    else {
        return;
    };
    assert_no_loop_traced_or_captured(&observed);
    let (trace, analysed) = &observed[0];
    for (how, trace) in [("trace", trace), ("analyze of a capture", analysed)] {
        let dead = SocketAddr::new(DEAD_DNS.into(), 53);
        assert!(
            trace
                .timeouts()
                .iter()
                .any(|timeout| timeout.server == dead),
            "node 0, {how}: no timeout naming the dead upstream {dead}\n{trace}"
        );
    }
}

#[test]
fn other_nodes_asking_a_pod_what_it_forwards_to_a_slow_upstream_is_no_loop() {
    // cluster-slow-upstream: the upstream answers 150 ms late. The client on node 0 asks
    // CoreDNS pod A an external name; at the same moments clients on node 1 ask pod A the same
    // name over the overlay, so pod A forwards it upstream several times while its earlier
    // forwards are still unanswered, and the answers come back late, out of step with the
    // questions. Slow is not dead: every question gets its answer.
    let coredns_a = Pod::CoreDnsA.ip().to_string();
    let Some(observed) =
        traced_and_captured_cluster(test_name!(), Scenario::ClusterSlowUpstream, 2, |lab, _| {
            let lab = &*lab;
            let ask = |node: usize| client_gets_an_answer(lab, node, &coredns_a, EXTERNAL_NAME);
            for _ in 0..ROUNDS {
                thread::scope(|scope| {
                    scope.spawn(|| ask(0));
                    for _ in 0..OTHER_NODE_CLIENTS {
                        scope.spawn(|| ask(1));
                    }
                });
            }
        })
    else {
        return;
    };
    assert_no_loop_traced_or_captured(&observed);
}
