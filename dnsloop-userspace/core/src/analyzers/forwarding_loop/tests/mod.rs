use std::time::Duration;

use dnsloop_shared::{parse::Probe, point::Direction};

use super::ForwardingLoops;
use crate::{
    analyzers::Analyzer,
    finding::{Finding, LoopFinding},
    observation::Observation,
    points::NODE,
    present::names::Names,
    testkit::observations::*,
};

mod not_taken_in;
mod other_nodes;
mod out_of_sight;

pub(super) const NAME: &str = "www.example.test.";
/// From a re-entry to the moment it is known to be a delivery.
pub(super) const SETTLE_MS: u64 = 50;

pub(super) fn analyzer() -> ForwardingLoops {
    ForwardingLoops::new(
        Duration::from_millis(SETTLE_MS),
        Duration::from_secs(2),
        Duration::from_secs(10),
        4096,
        Names::AsSent,
    )
}

pub(super) fn loops(findings: Vec<Finding>) -> Vec<LoopFinding> {
    findings
        .into_iter()
        .map(|finding| match finding {
            Finding::Loop(found) => found,
            other => panic!("not a loop: {other:?}"),
        })
        .collect()
}

pub(super) fn servers(found: &LoopFinding) -> Vec<String> {
    found.servers.iter().map(ToString::to_string).collect()
}

pub(super) fn hops(found: &LoopFinding) -> Vec<(&str, &str, String, String, u16)> {
    found
        .path
        .iter()
        .map(|hop| {
            (
                hop.point.ifname.as_ref(),
                hop.point.direction.as_str(),
                hop.src.to_string(),
                hop.dst.to_string(),
                hop.id,
            )
        })
        .collect()
}

/// The client asks the node-local cache at `start`.
pub(super) fn client_asks_node_cache(start: u64) -> Vec<Observation> {
    query(NAME)
        .id(4242)
        .from("10.244.0.2:41234")
        .to("169.254.25.10:53")
        .at_ms(start)
        .route(&[CLIENT_OUT, NODE_FROM_BRIDGE])
}

/// Round `round` of the node-local loop, 2 ms per round from `start`: the cache forwards to
/// kube-dns (tc sees the node's own query after the OUTPUT chain's DNAT, so already addressed
/// to the pod), and CoreDNS forwards to its upstream, which is the node-local cache.
pub(super) fn nodelocal_round(start: u64, round: u16) -> [Vec<Observation>; 2] {
    let at = start + 1 + 2 * u64::from(round);
    [
        query(NAME)
            .id(1000 + round)
            .from(&format!("10.244.0.1:{}", 50000 + round))
            .to("10.244.0.3:53")
            .at_ms(at)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        query(NAME)
            .id(2000 + round)
            .from(&format!("10.244.0.3:{}", 40000 + round))
            .to("169.254.25.10:53")
            .at_ms(at + 1)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
    ]
}

fn nodelocal_loop(start: u64, rounds: u16) -> Vec<Vec<Observation>> {
    let mut observations = vec![client_asks_node_cache(start)];
    for round in 0..rounds {
        observations.extend(nodelocal_round(start, round));
    }
    observations
}

#[test]
fn nodelocal_loop_is_reported_at_the_first_reentry_with_its_path() {
    let mut loops_seen = analyzer();
    // The client's query, the cache's forward to CoreDNS, CoreDNS's forward back: the question
    // re-enters the node at 2.01 ms (cni0 ingress), which settles 50 ms later.
    let early = run(
        &mut loops_seen,
        nodelocal_loop(0, 1).concat(),
        us(2_010 + SETTLE_MS * 1000 - 1),
    );
    assert!(early.is_empty(), "{early:?}");
    let mut findings = Vec::new();
    loops_seen.tick(us(2_010 + SETTLE_MS * 1000), &mut findings);
    let found = loops(findings);
    assert_eq!(found.len(), 1);
    let found = &found[0];
    assert_eq!(found.ts, us(2_010));
    assert_eq!(found.qname, NAME);
    assert_eq!(found.qtype, A);
    assert_eq!(found.count, 1);
    assert_eq!(found.probe, Probe::None);
    assert_eq!(servers(found), ["10.244.0.3", "169.254.25.10"]);
    assert_eq!(
        hops(found),
        [
            (
                "cni0",
                "egress",
                "10.244.0.1:50000".into(),
                "10.244.0.3:53".into(),
                1000
            ),
            (
                "veth-coredns-a",
                "egress",
                "10.244.0.1:50000".into(),
                "10.244.0.3:53".into(),
                1000
            ),
            (
                "veth-coredns-a",
                "ingress",
                "10.244.0.3:40000".into(),
                "169.254.25.10:53".into(),
                2000
            ),
            (
                "cni0",
                "ingress",
                "10.244.0.3:40000".into(),
                "169.254.25.10:53".into(),
                2000
            ),
        ]
    );
    assert_eq!(
        found.summary,
        "loop: www.example.test. A: node -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 (node) \
         (4 hops): pod 10.244.0.3 forwards to 169.254.25.10 on the node, which sends the question \
         back: its upstream points at the node-local cache; check the resolv.conf CoreDNS uses \
         (kubelet resolvConf, `forward . /etc/resolv.conf`)"
    );
}

#[test]
fn a_forward_first_seen_before_dnat_names_the_cluster_ip() {
    // On a routed CNI, CoreDNS's forward to the ClusterIP crosses tc ingress on its veth before
    // PREROUTING's DNAT: the server is the address CoreDNS was configured with.
    let observations = vec![
        query(NAME)
            .from("10.244.1.5:33333")
            .to("10.96.0.10:53")
            .at_ms(0)
            .seen(POD_B_TO_NODE),
        query(NAME)
            .from("10.244.1.5:33333")
            .to("10.244.0.3:53")
            .at_us(10)
            .seen(NODE_TO_COREDNS),
        query(NAME)
            .id(7)
            .from("10.244.0.3:40000")
            .to("10.96.0.10:53")
            .at_ms(1)
            .seen(COREDNS_TO_NODE),
        query(NAME)
            .id(7)
            .from("10.244.0.3:40000")
            .to("10.244.0.3:53")
            .at_us(1010)
            .seen(NODE_TO_COREDNS),
    ];
    let found = loops(run(&mut analyzer(), observations, ms(100)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(servers(&found[0]), ["10.96.0.10"]);
    assert!(
        found[0].summary.starts_with(
            "loop: www.example.test. A: pod 10.244.0.3 -> 10.96.0.10 (pod 10.244.0.3) (2 hops): \
             pod 10.244.0.3 forwards to 10.96.0.10, which leads back to itself"
        ),
        "{}",
        found[0].summary
    );
}

#[test]
fn nodelocal_loop_over_tcp() {
    // CoreDNS with `force_tcp` towards the cache, the cache towards CoreDNS over TCP too.
    let observations = [
        client_asks_node_cache(0),
        query(NAME)
            .tcp()
            .id(1000)
            .from("10.244.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        query(NAME)
            .tcp()
            .id(2000)
            .from("10.244.0.3:40000")
            .to("169.254.25.10:53")
            .at_ms(2)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
    ];
    let found = loops(run(&mut analyzer(), observations.concat(), ms(100)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(servers(&found[0]), ["10.244.0.3", "169.254.25.10"]);
}

#[test]
fn a_pod_forwarding_to_its_own_loopback_is_a_loop_once_it_comes_round_again() {
    let mut observations = vec![
        // A client asks kube-dns; the bridge DNATs it to CoreDNS.
        query(NAME)
            .from("10.244.0.2:41234")
            .to("10.96.0.10:53")
            .at_ms(0)
            .seen(CLIENT_OUT),
        query(NAME)
            .from("10.244.0.2:41234")
            .to("10.244.0.3:53")
            .at_us(10)
            .seen(COREDNS_IN),
    ];
    // CoreDNS's resolv.conf says 127.0.0.53, which in its own namespace is CoreDNS itself.
    for round in 0..3u16 {
        observations.push(
            query(NAME)
                .id(100 + round)
                .from(&format!("127.0.0.1:{}", 40000 + round))
                .to("127.0.0.53:53")
                .at_ms(1 + u64::from(round))
                .seen(COREDNS_LO),
        );
    }
    let found = loops(run(&mut analyzer(), observations, ms(200)));
    // Rounds 2 and 3 are two re-entries of one loop: one report.
    assert_eq!(found.len(), 1, "{found:?}");
    let found = &found[0];
    assert_eq!(found.ts, ms(2));
    assert_eq!(servers(found), ["127.0.0.53"]);
    assert_eq!(
        hops(found),
        [(
            "lo",
            "egress",
            "127.0.0.1:40001".into(),
            "127.0.0.53:53".into(),
            101
        )]
    );
    assert_eq!(
        found.summary,
        "loop: www.example.test. A: pod 10.244.0.3 -> 127.0.0.53 (pod 10.244.0.3) (1 hop): \
         pod 10.244.0.3 forwards to itself over loopback (127.0.0.53): give it an upstream outside \
         itself (its resolv.conf, or the Corefile's forward target)"
    );
}

#[test]
fn coredns_probe_is_a_loop_on_its_first_return() {
    const PROBE: &str = "4086431233.1853066397.";
    let observations = [
        // CoreDNS's loop plugin asks its upstream, the node-local cache...
        query(PROBE)
            .qtype(HINFO)
            .probe(Probe::CoreDns)
            .id(9)
            .from("10.244.0.3:40000")
            .to("169.254.25.10:53")
            .at_ms(0)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        // ...which forwards it straight back to CoreDNS.
        query(PROBE)
            .qtype(HINFO)
            .probe(Probe::CoreDns)
            .id(10)
            .from("10.244.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
    ];
    let found = loops(run(&mut analyzer(), observations.concat(), ms(100)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].probe, Probe::CoreDns);
    assert_eq!(found[0].qtype, HINFO);
    assert_eq!(
        found[0].summary,
        "loop: 4086431233.1853066397. HINFO: node -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 \
         (node) (4 hops): pod 10.244.0.3 forwards to 169.254.25.10 on the node, which sends the \
         question back: its upstream points at the node-local cache; check the resolv.conf CoreDNS \
         uses (kubelet resolvConf, `forward . /etc/resolv.conf`)"
    );
}

#[test]
fn dnsmasq_probe_coming_back_through_an_unwatched_resolver() {
    const PROBE: &str = "0a1b2c3d.test.";
    let observations = vec![
        // dnsmasq on the node probes its upstream beyond the uplink...
        query(PROBE)
            .qtype(TXT)
            .probe(Probe::Dnsmasq)
            .id(1)
            .from("192.168.1.10:40000")
            .to("192.0.2.53:53")
            .at_ms(0)
            .seen(NODE_TO_UPLINK),
        // ...which forwards it back to the node: the chain is broken, the probe name is not.
        query(PROBE)
            .qtype(TXT)
            .probe(Probe::Dnsmasq)
            .id(2)
            .from("192.0.2.53:33333")
            .to("192.168.1.10:53")
            .at_ms(5)
            .seen(NODE_FROM_UPLINK),
    ];
    let found = loops(run(&mut analyzer(), observations, ms(100)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].probe, Probe::Dnsmasq);
    assert_eq!(servers(&found[0]), ["192.0.2.53", "192.168.1.10"]);
    assert_eq!(
        found[0].summary,
        "loop: 0a1b2c3d.test. TXT: node -> 192.0.2.53 via eth0 (off the node) ... back from \
         192.0.2.53 via eth0 -> 192.168.1.10 (node) (2 hops): the question came back through a \
         resolver outside the watched namespaces: check where its upstreams forward to. Part of \
         the loop is off this node, out of sight: the tracers of the nodes it crosses report it \
         with the same loop_id"
    );
}

#[test]
fn a_loop_is_reported_once_then_once_per_interval_with_its_count() {
    // The loop goes round every 100 ms for 25 s: 2 re-entries per round.
    let mut observations = vec![client_asks_node_cache(0)];
    for round in 0..250u16 {
        let [to_coredns, to_node] = nodelocal_round(0, round);
        let shift = |trip: Vec<Observation>| -> Vec<Observation> {
            trip.into_iter()
                .map(|mut obs| {
                    obs.ts += Duration::from_millis(98 * u64::from(round));
                    obs
                })
                .collect()
        };
        observations.push(shift(to_coredns));
        observations.push(shift(to_node));
    }
    let mut loops_seen = analyzer();
    let reports = loops(run(&mut loops_seen, observations.concat(), ms(30_000)));
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert_eq!(reports[0].count, 1);
    for pair in reports.windows(2) {
        assert!(pair[1].count > pair[0].count);
        assert!(pair[1].ts.duration_since(pair[0].ts).unwrap() >= Duration::from_secs(10));
    }
    // 250 rounds re-enter 499 times (the first forward to CoreDNS is no re-entry); the end of
    // the input reports the final count.
    let mut last = Vec::new();
    loops_seen.finish(ms(30_000), &mut last);
    let last = loops(last);
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].count, 499);
}

/// Replies from `server` to `client` leaving the server's side at `at` ms.
fn node_answers_client(id: u16, client: &str, at: u64) -> Vec<Observation> {
    reply(NAME)
        .id(id)
        .from("169.254.25.10:53")
        .to(client)
        .at_ms(at)
        .route(&[NODE_TO_BRIDGE, CLIENT_IN])
}

#[test]
fn one_client_asking_the_same_name_30_times_is_no_loop() {
    let mut observations = Vec::new();
    for n in 0..30u16 {
        let at = 100 * u64::from(n);
        let client = format!("10.244.0.2:{}", 30000 + n);
        observations.push(
            query(NAME)
                .id(n)
                .from(&client)
                .to("169.254.25.10:53")
                .at_ms(at)
                .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        );
        observations.push(node_answers_client(n, &client, at + 1));
    }
    // The first one missed the cache: the cache asked the upstream.
    observations.push(
        query(NAME)
            .id(7777)
            .from("192.168.1.10:40000")
            .to("192.0.2.53:53")
            .at_us(300)
            .route(&[NODE_TO_UPLINK]),
    );
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn a_host_client_asking_the_same_name_every_20_ms_is_no_loop() {
    // Each query is answered before the next is sent, so none of them is forwarded as the
    // next: the cache owes nothing when the next one comes.
    let mut observations = Vec::new();
    for n in 0..30u16 {
        let at = 20 * u64::from(n);
        let host = format!("127.0.0.1:{}", 20000 + n);
        observations.push(
            query(NAME)
                .id(n)
                .from(&host)
                .to("169.254.25.10:53")
                .at_ms(at)
                .route(&[NODE_LO]),
        );
        observations.push(
            reply(NAME)
                .id(n)
                .from("169.254.25.10:53")
                .to(&host)
                .at_ms(at + 1)
                .route(&[NODE_LO]),
        );
    }
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn a_host_client_retrying_with_new_ids_while_the_upstream_is_slow_is_no_loop() {
    let mut observations = Vec::new();
    for n in 0..3u16 {
        let at = 1000 * u64::from(n);
        observations.push(
            query(NAME)
                .id(n)
                .from(&format!("127.0.0.1:{}", 20000 + n))
                .to("169.254.25.10:53")
                .at_ms(at)
                .route(&[NODE_LO]),
        );
    }
    observations.push(
        query(NAME)
            .id(7777)
            .from("192.168.1.10:40000")
            .to("192.0.2.53:53")
            .at_ms(1)
            .route(&[NODE_TO_UPLINK]),
    );
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn a_node_cache_forwarding_to_a_local_stub_resolver_is_a_chain_not_a_loop() {
    let observations = [
        client_asks_node_cache(0),
        // node-local-dns forwards to systemd-resolved on the node's 127.0.0.53...
        query(NAME)
            .id(2)
            .from("127.0.0.1:40000")
            .to("127.0.0.53:53")
            .at_ms(1)
            .route(&[NODE_LO]),
        // ...which forwards to a dnsmasq on 127.0.0.1:5353, which asks the real upstream.
        query(NAME)
            .id(3)
            .from("127.0.0.1:40001")
            .to("127.0.0.1:5353")
            .at_ms(2)
            .route(&[NODE_LO]),
        query(NAME)
            .id(4)
            .from("192.168.1.10:40002")
            .to("192.0.2.53:53")
            .at_ms(3)
            .route(&[NODE_TO_UPLINK]),
    ];
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn a_clients_retries_with_one_id_are_no_loop() {
    let mut observations = Vec::new();
    for attempt in 0..3u16 {
        let at = 1000 * u64::from(attempt);
        observations.push(
            query(NAME)
                .id(42)
                .at_ms(at)
                .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        );
        // Each time the cache asks the upstream again, which never answers.
        observations.push(
            query(NAME)
                .id(900 + attempt)
                .from("192.168.1.10:40000")
                .to("192.0.2.53:53")
                .at_ms(at + 1)
                .route(&[NODE_TO_UPLINK]),
        );
    }
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn search_list_expansion_is_no_loop() {
    let names = [
        "api.default.svc.cluster.local.",
        "api.svc.cluster.local.",
        "api.cluster.local.",
        "api.",
    ];
    let mut observations = Vec::new();
    for (n, name) in (0u16..).zip(names) {
        let at = u64::from(n) * 3;
        observations.push(
            query(name)
                .id(n)
                .at_ms(at)
                .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        );
        // The cache forwards cluster names to CoreDNS, which answers NXDOMAIN itself.
        observations.push(
            query(name)
                .id(100 + n)
                .from("10.244.0.1:50000")
                .to("10.244.0.3:53")
                .at_ms(at + 1)
                .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        );
        observations.push(
            reply(name)
                .id(100 + n)
                .from("10.244.0.3:53")
                .to("10.244.0.1:50000")
                .at_ms(at + 2)
                .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        );
    }
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn two_clients_while_a_pod_and_the_node_both_forward_upstream_is_no_loop() {
    let observations = [
        // Client A asks the node-local cache.
        client_asks_node_cache(0),
        vec![
            // Client B, on a routed CNI, asks kube-dns: routed through the node into CoreDNS.
            query(NAME)
                .id(77)
                .from("10.244.1.5:33333")
                .to("10.96.0.10:53")
                .at_us(200)
                .seen(POD_B_TO_NODE),
            query(NAME)
                .id(77)
                .from("10.244.1.5:33333")
                .to("10.244.0.3:53")
                .at_us(210)
                .seen(NODE_TO_COREDNS),
            // The cache asks the upstream.
            query(NAME)
                .id(5)
                .from("192.168.1.10:40000")
                .to("192.0.2.53:53")
                .at_ms(1)
                .seen(NODE_TO_UPLINK),
            // CoreDNS asks the upstream too, routed through the node and masqueraded.
            query(NAME)
                .id(6)
                .from("10.244.0.3:40001")
                .to("192.0.2.53:53")
                .at_us(1200)
                .seen(COREDNS_TO_NODE),
            query(NAME)
                .id(6)
                .from("192.168.1.10:40001")
                .to("192.0.2.53:53")
                .at_us(1210)
                .seen(NODE_TO_UPLINK),
            // The upstream answers both.
            reply(NAME)
                .id(5)
                .from("192.0.2.53:53")
                .to("192.168.1.10:40000")
                .at_ms(20)
                .seen(NODE_FROM_UPLINK),
            reply(NAME)
                .id(6)
                .from("192.0.2.53:53")
                .to("192.168.1.10:40001")
                .at_ms(21)
                .seen(NODE_FROM_UPLINK),
            reply(NAME)
                .id(6)
                .from("192.0.2.53:53")
                .to("10.244.0.3:40001")
                .at_us(21010)
                .seen(NODE_TO_COREDNS),
        ],
    ];
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn a_healthy_cache_miss_chain_is_no_loop() {
    let observations = [
        client_asks_node_cache(0),
        query(NAME)
            .id(5)
            .from("10.244.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        query(NAME)
            .id(6)
            .from("10.244.0.3:40000")
            .to("192.0.2.53:53")
            .at_ms(2)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        // Masqueraded on its way out of the uplink.
        query(NAME)
            .id(6)
            .from("192.168.1.10:40000")
            .to("192.0.2.53:53")
            .at_us(2020)
            .route(&[NODE_TO_UPLINK]),
        reply(NAME)
            .id(6)
            .from("192.0.2.53:53")
            .to("192.168.1.10:40000")
            .at_ms(10)
            .route(&[NODE_FROM_UPLINK]),
        reply(NAME)
            .id(6)
            .from("192.0.2.53:53")
            .to("10.244.0.3:40000")
            .at_us(10010)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        reply(NAME)
            .id(5)
            .from("10.244.0.3:53")
            .to("10.244.0.1:50000")
            .at_ms(11)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        node_answers_client(4242, "10.244.0.2:41234", 12),
    ];
    assert_eq!(run(&mut analyzer(), observations.concat(), ms(5_000)), []);
}

#[test]
fn malformed_and_questionless_messages_are_ignored() {
    let mut no_question = query(NAME).at_ms(0).seen(CLIENT_OUT);
    no_question.question = None;
    let findings = run(&mut analyzer(), vec![no_question], ms(100));
    assert_eq!(findings, []);
}

#[test]
fn a_loop_through_both_coredns_pods_is_one_loop() {
    // kube-proxy spreads the cache's forwards over both CoreDNS pods, so the question goes round
    // node -> pod A -> node -> pod B -> node...: several cycles, one loop for the operator.
    let mut observations = client_asks_node_cache(0);
    for round in 0..4u16 {
        let (pod, into_pod, out_of_pod) = if round % 2 == 0 {
            ("10.244.0.3", COREDNS_IN, COREDNS_OUT)
        } else {
            ("10.244.0.4", COREDNS_B_IN, COREDNS_B_OUT)
        };
        let at = 1 + 2 * u64::from(round);
        observations.extend(
            query(NAME)
                .id(1000 + round)
                .from(&format!("10.244.0.1:{}", 50000 + round))
                .to(&format!("{pod}:53"))
                .at_ms(at)
                .route(&[NODE_TO_BRIDGE, into_pod]),
        );
        observations.extend(
            query(NAME)
                .id(2000 + round)
                .from(&format!("{pod}:{}", 40000 + round))
                .to("169.254.25.10:53")
                .at_ms(at + 1)
                .route(&[out_of_pod, NODE_FROM_BRIDGE]),
        );
    }
    let mut loops_seen = analyzer();
    let found = loops(run(&mut loops_seen, observations, ms(100)));
    assert_eq!(found.len(), 1, "one report for the question: {found:?}");
    // The end of the input reports the final count: 8 forwards re-enter 6 times (the first
    // forward to each CoreDNS pod is no re-entry).
    let mut last = Vec::new();
    loops_seen.finish(ms(100), &mut last);
    assert_eq!(loops(last)[0].count, 6);
}

#[test]
fn a_server_that_merges_the_copy_it_sends_itself_is_a_loop_when_it_sends_it_again() {
    // unbound forwarding to itself folds the copy it receives into the query it is working on
    // and sends the question round again only when it retries, hundreds of milliseconds later.
    // Nothing ever leaves the pod: unlike a resolver behind a loopback address, which sends the
    // question on at once.
    let mut observations = vec![query(NAME)
        .from("10.244.0.2:41234")
        .to("10.244.0.3:53")
        .at_ms(0)
        .seen(COREDNS_IN)];
    for round in 0..3u16 {
        observations.push(
            query(NAME)
                .id(100 + round)
                .from(&format!("127.0.0.1:{}", 40000 + round))
                .to("127.0.0.1:53")
                .at_ms(1 + 370 * u64::from(round))
                .seen(COREDNS_LO),
        );
    }
    let found = loops(run(&mut analyzer(), observations, ms(2_000)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].ts, ms(371), "reported when it comes round again");
    assert_eq!(servers(&found[0]), ["127.0.0.1"]);
}

/// How an `-i any` capture places packets by their addresses: a bridge port and the bridge
/// itself both look like a link between the node and the pod whose address the packet carries,
/// so every crossing of a bridged pod's link is seen twice in a row.
pub(super) const fn crossing(
    ifname: &'static str,
    direction: Direction,
    pod: &'static str,
) -> Spot {
    let (leaves, enters) = match direction {
        Direction::Ingress => (pod, NODE),
        Direction::Egress => (NODE, pod),
    };
    Spot {
        ifname,
        direction,
        leaves: Some(leaves),
        enters: Some(enters),
    }
}

/// The node-local cache forwards a client's query to CoreDNS, which forwards it to a dead
/// upstream through the node, each query seen at the spots given.
fn forwarded_to_a_dead_upstream(
    client_out: &[Spot],
    to_coredns: &[Spot],
    coredns_out: &[Spot],
) -> Vec<Observation> {
    [
        query(NAME)
            .id(4242)
            .from("10.244.0.2:41234")
            .to("169.254.25.10:53")
            .at_ms(0)
            .route(client_out),
        query(NAME)
            .id(5)
            .from("10.255.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(to_coredns),
        query(NAME)
            .id(6)
            .from("10.244.0.3:40000")
            .to("10.255.0.99:53")
            .at_ms(2)
            .route(coredns_out),
    ]
    .concat()
}

/// The question enters the node again only on its way out of the uplink.
#[test]
fn a_forward_routed_through_the_node_and_seen_at_port_and_bridge_is_no_loop() {
    let uplink = Spot {
        ifname: "eth0",
        direction: Direction::Egress,
        leaves: Some(NODE),
        enters: Some("host 10.255.0.99"),
    };
    let observations = forwarded_to_a_dead_upstream(
        &[
            crossing("veth-client", Direction::Ingress, CLIENT),
            crossing("cni0", Direction::Ingress, CLIENT),
        ],
        &[
            crossing("cni0", Direction::Egress, COREDNS),
            crossing("veth-coredns-a", Direction::Egress, COREDNS),
        ],
        &[
            crossing("veth-coredns-a", Direction::Ingress, COREDNS),
            crossing("cni0", Direction::Ingress, COREDNS),
            uplink,
        ],
    );
    assert_eq!(run(&mut analyzer(), observations, ms(5_000)), []);
}

/// The same, as the tracer places it: each crossing seen once, at the pods' bridge ports.
#[test]
fn a_forward_routed_through_the_node_and_seen_at_its_port_is_no_loop() {
    let uplink = Spot {
        ifname: "eth0",
        direction: Direction::Egress,
        leaves: Some(NODE),
        enters: None,
    };
    let observations = forwarded_to_a_dead_upstream(
        &[crossing("veth-client", Direction::Ingress, CLIENT)],
        &[crossing("veth-coredns-a", Direction::Egress, COREDNS)],
        &[
            crossing("veth-coredns-a", Direction::Ingress, COREDNS),
            uplink,
        ],
    );
    assert_eq!(run(&mut analyzer(), observations, ms(5_000)), []);
}
