//! Questions that stay in a namespace without being taken in there are no link in a loop: a
//! forward held for a neighbour that never answers ARP, a query the kernel drops because nobody
//! listens on its port. Host processes asking again then look like the node forwarding the
//! question it was sent, unless the analyzer knows nothing received it.
use std::time::SystemTime;

use dnsloop_shared::point::Direction;

use super::{analyzer, crossing, NAME};
use crate::{
    analyzers::packet::MessageKey,
    finding::Finding,
    observation::{Namespace, Observation},
    testkit::observations::*,
};

/// A process on the node asks the ClusterIP (DNAT'ed to CoreDNS's pod), at `at` ms, with a new
/// id each time, as dig's tries do.
fn host_asks_coredns(try_number: u16, at: u64) -> Vec<Observation> {
    query(NAME)
        .id(100 + try_number)
        .from(&format!("10.255.0.1:{}", 30000 + try_number))
        .to("10.244.0.3:53")
        .at_ms(at)
        .route(&[crossing("veth-coredns-a", Direction::Egress, COREDNS)])
}

/// CoreDNS forwards it, 1 ms later, to a server on a subnet the node routes out of the pod
/// bridge: the forward enters the node and stays there, held for a neighbour nobody is.
fn coredns_forwards_to_a_gone_neighbour(try_number: u16, at: u64) -> Message {
    query(NAME)
        .id(200 + try_number)
        .from(&format!("10.244.0.3:{}", 40000 + try_number))
        .to("10.244.0.250:53")
        .at_ms(at + 1)
}

fn asked_three_times(forward: impl Fn(Message) -> Message) -> Vec<Observation> {
    (0..3u16)
        .flat_map(|try_number| {
            let at = 1_000 * u64::from(try_number);
            let held = forward(coredns_forwards_to_a_gone_neighbour(try_number, at))
                .route(&[crossing("veth-coredns-a", Direction::Ingress, COREDNS)]);
            [host_asks_coredns(try_number, at), held].concat()
        })
        .collect()
}

/// The same tries, but CoreDNS forwards each to the node cache, on `169.254.25.10` (held by the
/// node where `own_address` says so), which sends it back to CoreDNS at once: a loop.
fn looping_through_the_node_cache(own_address: Option<bool>) -> Vec<Observation> {
    let mut observations =
        asked_three_times(|forward| forward.to("169.254.25.10:53").to_own_address(own_address));
    for try_number in 0..3u16 {
        let at = 1_000 * u64::from(try_number) + 2;
        observations.extend(
            query(NAME)
                .id(300 + try_number)
                .from(&format!("10.255.0.1:{}", 50000 + try_number))
                .to("10.244.0.3:53")
                .at_ms(at)
                .route(&[crossing("veth-coredns-a", Direction::Egress, COREDNS)]),
        );
    }
    observations.sort_by_key(|obs| obs.ts);
    observations
}

#[test]
fn a_forward_held_for_a_neighbour_that_never_answers_is_no_loop() {
    let observations = asked_three_times(|forward| forward.to_own_address(Some(false)));
    assert_eq!(run(&mut analyzer(), observations, ms(5_000)), []);
}

#[test]
fn a_forward_to_an_address_of_the_node_still_closes_a_loop() {
    // CoreDNS forwards to the node cache, on an address of the node's: the node takes the
    // question in, and sends it back to CoreDNS.
    let observations = looping_through_the_node_cache(Some(true));
    let findings = run(&mut analyzer(), observations, ms(5_000));
    assert!(
        matches!(findings.as_slice(), [Finding::Loop(_), ..]),
        "{findings:?}"
    );
}

/// Feeds `observations` to `loops`, telling it first that the kernel dropped each query among
/// them for which `dropped` holds, in the namespace it entered, 5 µs after it was seen.
fn run_with_drops(
    loops: &mut super::ForwardingLoops,
    observations: Vec<Observation>,
    dropped: impl Fn(&Observation) -> bool,
    end: SystemTime,
) -> Vec<Finding> {
    for obs in observations.iter().filter(|obs| dropped(obs)) {
        let message = MessageKey::of(obs).expect("a question");
        let there = obs.point.enters.clone();
        loops.dropped(message, there, obs.ts + std::time::Duration::from_micros(5));
    }
    run(loops, observations, end)
}

#[test]
fn host_processes_asking_a_local_port_nobody_listens_on_are_no_loop() {
    // Two processes ask 127.0.0.1:53, where the node's resolver is down, within a second; the
    // kernel drops both queries (NO_SOCKET) and refuses them.
    let observations: Vec<Observation> = (0..2u16)
        .flat_map(|n| {
            query(NAME)
                .id(n)
                .from(&format!("127.0.0.1:{}", 20000 + n))
                .to("127.0.0.1:53")
                .at_ms(400 * u64::from(n))
                .route(&[NODE_LO])
        })
        .collect();
    let findings = run_with_drops(&mut analyzer(), observations, |_| true, ms(5_000));
    assert_eq!(findings, []);
}

#[test]
fn a_drop_elsewhere_does_not_undo_a_delivery() {
    // The node cache's loop (it forwards to CoreDNS, which forwards back), where the kernel
    // dropped each of CoreDNS's forwards in the client's pod: not where they stayed.
    let mut observations = super::client_asks_node_cache(0);
    for round in 0..3 {
        observations.extend(super::nodelocal_round(0, round).concat());
    }
    let mut loops = analyzer();
    for obs in &observations {
        if obs.src.port() >= 40000 {
            let message = MessageKey::of(obs).expect("a question");
            loops.dropped(message, Some(Namespace::new(CLIENT)), obs.ts);
        }
    }
    let findings = run(&mut loops, observations, ms(5_000));
    assert!(
        matches!(findings.as_slice(), [Finding::Loop(_), ..]),
        "{findings:?}"
    );
}

#[test]
fn a_cycle_through_a_namespace_whose_addresses_are_not_known_is_a_possible_loop() {
    // The same cycle through the node cache, as a capture shows it: nothing says that the node
    // holds 169.254.25.10, so the question may have stayed there unreceived.
    let observations = looping_through_the_node_cache(None);
    let findings = run(&mut analyzer(), observations, ms(5_000));
    let [Finding::Loop(found), ..] = findings.as_slice() else {
        panic!("no cycle: {findings:?}");
    };
    assert!(found.is_possible(), "{found:?}");
    assert!(
        findings
            .iter()
            .all(|finding| matches!(finding, Finding::Loop(found) if found.is_possible())),
        "{findings:?}"
    );
    let node = Namespace::new("node");
    assert!(
        found
            .unconfirmed
            .iter()
            .any(|delivery| delivery.namespace == node
                && delivery.at.to_string() == "169.254.25.10:53"),
        "{found:?}"
    );
    assert!(
        found.summary.starts_with("possible loop: ") && found.summary.contains("Not confirmed"),
        "{}",
        found.summary
    );
}

#[test]
fn a_host_process_asking_again_after_the_node_took_the_question_in_is_no_loop() {
    // The node asks CoreDNS (dig's tries, a second apart, new ids), and CoreDNS forwards each
    // to the node cache, which takes it in. Each next try leaves the node after it took the
    // question in, but a second later: the node's own client asking again, not the node
    // forwarding what it was sent (a forwarder sends on within milliseconds).
    let observations =
        asked_three_times(|forward| forward.to("169.254.25.10:53").to_own_address(Some(true)));
    assert_eq!(run(&mut analyzer(), observations, ms(5_000)), []);
}
