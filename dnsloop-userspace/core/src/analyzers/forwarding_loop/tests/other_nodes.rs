//! Loops through other nodes, seen from node A: its node-local cache forwards to the ClusterIP,
//! DNAT'ed to CoreDNS on node B (10.244.1.3) over the overlay; node B's cache sends the
//! question back over the overlay to CoreDNS on node A (10.244.0.3), which forwards it to node
//! A's cache. Node B's part of the round is out of sight.
use super::*;
use crate::{finding::Unconfirmable, observation::Namespace, present::names::Names};

/// Node B's address on the overlay, which its cache's queries to node A's pods come from.
const NODE_B: &str = "10.244.1.0";
const COREDNS_ON_B: &str = "10.244.1.3:53";
/// A round through node B every 4 ms.
const ROUND_MS: u64 = 4;

/// Round `round` from `start`: node A's cache sends the question off the node, and it comes back
/// 2 ms later to CoreDNS on node A, which forwards it to node A's cache.
fn round_through_node_b(start: u64, round: u16) -> [Vec<Observation>; 3] {
    let at = start + 1 + ROUND_MS * u64::from(round);
    [
        query(NAME)
            .id(1000 + round)
            .from(&format!("10.244.0.0:{}", 50000 + round))
            .to(COREDNS_ON_B)
            .at_ms(at)
            .route(&[NODE_TO_OVERLAY]),
        query(NAME)
            .id(3000 + round)
            .from(&format!("{NODE_B}:{}", 41000 + round))
            .to("10.244.0.3:53")
            .at_ms(at + 2)
            .route(&[NODE_FROM_OVERLAY, NODE_TO_BRIDGE, COREDNS_IN]),
        query(NAME)
            .id(2000 + round)
            .from(&format!("10.244.0.3:{}", 40000 + round))
            .to("169.254.25.10:53")
            .at_ms(at + 3)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
    ]
}

fn loop_through_node_b(rounds: u16) -> Vec<Observation> {
    let mut observations = vec![client_asks_node_cache(0)];
    for round in 0..rounds {
        observations.extend(round_through_node_b(0, round));
    }
    observations.concat()
}

#[test]
fn a_loop_through_another_node_is_reported_at_its_second_return() {
    // One round: the question left and came back once, which another node's client asking
    // CoreDNS on this node the same name would also show.
    let one_round = run(&mut analyzer(), loop_through_node_b(1), ms(500));
    assert_eq!(loops(one_round), []);

    let found = loops(run(&mut analyzer(), loop_through_node_b(2), ms(500)));
    assert_eq!(found.len(), 1, "{found:?}");
    let found = &found[0];
    // Reported as the second return reached node A's cache (cni0 ingress, round 1 at 8 ms).
    assert_eq!(found.ts, us(8_010));
    assert_eq!(found.count, 2, "two rounds seen, both counted");
    assert_eq!(
        servers(found),
        ["10.244.1.3", "10.244.0.3", "169.254.25.10"]
    );
    assert_eq!(found.off_node.len(), 1);
    let off_node = &found.off_node[0];
    assert_eq!(
        (
            off_node.left_via.as_ref(),
            off_node.sent_to.to_string(),
            off_node.back_from.ip().to_string(),
            off_node.back_via.as_ref()
        ),
        (
            "vxlan0",
            COREDNS_ON_B.to_owned(),
            NODE_B.to_owned(),
            "vxlan0"
        )
    );
    // Only the hops seen here: none is made up for node B.
    assert_eq!(
        hops(found)
            .iter()
            .map(|(ifname, dir, ..)| format!("{ifname} {dir}"))
            .collect::<Vec<_>>(),
        [
            "vxlan0 egress",
            "vxlan0 ingress",
            "cni0 egress",
            "veth-coredns-a egress",
            "veth-coredns-a ingress",
            "cni0 ingress"
        ]
    );
    assert_eq!(
        found.summary,
        "loop: www.example.test. A: node -> 10.244.1.3 via vxlan0 (off the node) ... back from \
         10.244.1.0 via vxlan0 -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 (node) (6 hops): \
         pod 10.244.0.3 forwards to 169.254.25.10 on the node, which sends the question back: its \
         upstream points at the node-local cache; check the resolv.conf CoreDNS uses (kubelet \
         resolvConf, `forward . /etc/resolv.conf`). Part of the loop is off this node, out of \
         sight: the tracers of the nodes it crosses report it with the same loop_id"
    );
}

#[test]
fn a_loop_through_another_node_is_counted_per_round_and_keeps_its_id() {
    let mut analyzer = ForwardingLoops::new(
        Duration::from_millis(SETTLE_MS),
        Duration::from_secs(2),
        Duration::from_millis(100),
        4096,
        Names::AsSent,
    );
    // 200 rounds, 0.8 s: reported at the second return, then every 100 ms, then at the end.
    let mut found = loops(run(&mut analyzer, loop_through_node_b(200), ms(1_000)));
    let mut last = Vec::new();
    analyzer.finish(ms(1_000), &mut last);
    found.extend(loops(last));
    assert!((8..=10).contains(&found.len()), "{found:?}");
    assert!(found.iter().all(|each| each.loop_id == found[0].loop_id));
    // Re-entries, as for a loop on one node: every round re-enters CoreDNS's pod and the node
    // (199 into the node, 198 into the pod: the first return into the pod had no round before
    // it), and the first report counts the round it proved.
    assert_eq!(found.last().map(|last| last.count), Some(398));
}

#[test]
fn a_loop_id_is_the_questions_whatever_the_case_and_the_node() {
    let on_node_a = loops(run(&mut analyzer(), loop_through_node_b(2), ms(500)));
    // Node B sees another part of the same loop, its own ids and addresses, and (0x20
    // encoding) another case.
    let on_node_b: Vec<Observation> = loop_through_node_b(2)
        .into_iter()
        .map(|mut obs| {
            obs.id ^= 0x5555;
            obs.question = query("WWW.Example.TEST.").seen(CLIENT_OUT).question;
            obs
        })
        .collect();
    let on_node_b = loops(run(&mut analyzer(), on_node_b, ms(500)));
    assert_eq!(on_node_a[0].loop_id, on_node_b[0].loop_id);
    let other_question = loops(run(
        &mut analyzer(),
        loop_through_node_b(2)
            .into_iter()
            .map(|mut obs| {
                obs.question = query("api.example.test.").seen(CLIENT_OUT).question;
                obs
            })
            .collect(),
        ms(500),
    ));
    assert_ne!(on_node_a[0].loop_id, other_question[0].loop_id);
}

/// A client on node B asks CoreDNS on node A (query `n`, at `at` ms), over the overlay.
fn client_on_node_b_asks(at: u64, n: u16) -> Vec<Observation> {
    query(NAME)
        .id(7000 + n)
        .from(&format!("10.244.1.2:{}", 30000 + n))
        .to("10.244.0.3:53")
        .at_ms(at)
        .route(&[NODE_FROM_OVERLAY, NODE_TO_BRIDGE, COREDNS_IN])
}

/// A client on node B asks CoreDNS on node A the name at `at`, which CoreDNS forwards to the
/// upstream beyond the uplink.
fn client_on_node_b_asks_coredns_a(at: u64, n: u16) -> Vec<Vec<Observation>> {
    vec![
        client_on_node_b_asks(at, n),
        query(NAME)
            .id(8000 + n)
            .from(&format!("10.244.0.3:{}", 31000 + n))
            .to("10.255.0.53:53")
            .at_ms(at + 1)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE, NODE_TO_UPLINK]),
    ]
}

#[test]
fn clients_on_two_nodes_asking_one_name_at_once_is_no_loop() {
    // Five times over: node A's client asks its cache, which sends the question to CoreDNS on
    // node B, while node B's client asks CoreDNS on node A (directly, or through the ClusterIP
    // DNAT'ed on node B): the question leaves node A and "comes back" at once.
    let mut observations = Vec::new();
    for n in 0..5u16 {
        let at = 3 * u64::from(n);
        observations.extend(
            query(NAME)
                .id(4000 + n)
                .from(&format!("10.244.0.2:{}", 20000 + n))
                .to("169.254.25.10:53")
                .at_ms(at)
                .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        );
        observations.push(
            query(NAME)
                .id(1000 + n)
                .from(&format!("10.244.0.0:{}", 50000 + n))
                .to(COREDNS_ON_B)
                .at_ms(at + 1)
                .seen(NODE_TO_OVERLAY),
        );
        observations.extend(client_on_node_b_asks_coredns_a(at + 2, n).concat());
    }
    let found = loops(run(&mut analyzer(), observations, ms(3_000)));
    assert_eq!(found, []);
}

#[test]
fn a_pod_forwarding_upstream_while_other_nodes_ask_it_is_no_loop() {
    // CoreDNS on node A forwards the name to a slow or dead upstream for a local client; clients
    // on node B ask it the same name, again and again, while its forwards are unanswered.
    let mut observations = query(NAME)
        .id(11)
        .from("10.244.0.2:41234")
        .to("10.244.0.3:53")
        .at_ms(0)
        .route(&[CLIENT_OUT, COREDNS_IN]);
    observations.extend(
        query(NAME)
            .id(12)
            .from("10.244.0.3:31999")
            .to("10.255.0.53:53")
            .at_ms(1)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE, NODE_TO_UPLINK]),
    );
    for n in 0..20u16 {
        observations.extend(client_on_node_b_asks_coredns_a(5 + 10 * u64::from(n), n).concat());
    }
    let found = loops(run(&mut analyzer(), observations, ms(3_000)));
    assert_eq!(found, []);
}

#[test]
fn a_question_coming_back_after_a_clients_retry_interval_is_no_return() {
    // Node A's cache sends the question to node B; a second later (a resolver's retry, not a
    // round of a loop) the same question arrives from node B, twice.
    let mut observations = client_asks_node_cache(0);
    for round in 0..3u16 {
        let [sent, back, forwarded] = round_through_node_b(0, round);
        let later = |obs: Vec<Observation>| -> Vec<Observation> {
            obs.into_iter()
                .map(|mut obs| {
                    obs.ts += Duration::from_secs(u64::from(round));
                    obs
                })
                .collect()
        };
        observations.extend(later(sent));
        // Back only after the retry interval: the send of this round is not what came back.
        observations.extend(later(back).into_iter().map(|mut obs| {
            obs.ts += Duration::from_millis(900);
            obs
        }));
        observations.extend(later(forwarded).into_iter().map(|mut obs| {
            obs.ts += Duration::from_millis(900);
            obs
        }));
    }
    let found = loops(run(&mut analyzer(), observations, ms(5_000)));
    assert_eq!(found, []);
}

#[test]
fn a_loop_through_another_node_and_through_the_node_alone_is_reported_as_both() {
    // Rounds 0 and 1 cross node B; then the ClusterIP's DNAT picks CoreDNS on node A and the
    // question goes round on the node alone.
    let mut observations = loop_through_node_b(2);
    // Round 5 of the node's own loop starts at 20 ms, after the two rounds through node B.
    observations.extend(nodelocal_round(9, 5).concat());
    let found = loops(run(&mut analyzer(), observations, ms(500)));
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].off_node.len(), 1);
    assert_eq!(found[1].off_node, []);
    assert_eq!(found[0].loop_id, found[1].loop_id);
}

#[test]
fn clients_on_another_node_asking_what_a_pod_forwards_to_a_dead_server_over_the_overlay_is_no_loop()
{
    // CoreDNS on node A forwards a stub domain to a server gone from node B's pod network,
    // reached over the same overlay device its clients on node B come in by. Those clients ask
    // it the name every 10 ms, each within a few ms of its last forward leaving.
    let mut observations = Vec::new();
    for n in 0..20u16 {
        let at = 10 * u64::from(n);
        observations.extend(client_on_node_b_asks(at, n));
        observations.extend(
            query(NAME)
                .id(8000 + n)
                .from(&format!("10.244.0.3:{}", 31000 + n))
                .to("10.244.1.99:53")
                .at_ms(at + 1)
                .route(&[COREDNS_OUT, NODE_FROM_BRIDGE, NODE_TO_OVERLAY]),
        );
    }
    // From here it may be a loop (a server on node B that forwards back to CoreDNS on node A
    // would look the same): possible, never more, and saying why.
    let found = loops(run(&mut analyzer(), observations, ms(3_000)));
    assert!(found.iter().all(LoopFinding::is_possible), "{found:?}");
    assert!(
        found.iter().all(|found| found
            .unconfirmed
            .iter()
            .any(|delivery| delivery.why == Unconfirmable::BackAtItsSender
                && delivery.namespace == Namespace::new(COREDNS))),
        "{found:?}"
    );
}
