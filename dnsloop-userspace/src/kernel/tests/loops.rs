//! Forwarding loops: a question coming back into the forwarder that sent it is streamed from
//! then on, through a bridge too; a popular question forwarded for many clients is not.
use std::net::{IpAddr, Ipv4Addr};

use dnsloop_frames::*;
use dnsloop_shared::{counter::Counter, point::Direction, record::StreamReason};

use crate::kernel::{
    clock::monotonic_now_ns,
    programs::{self, Build},
};

use super::kit::*;

/// Namespaces the test runs' two directions cross, as userspace would number them: frames run
/// on ingress come from a client pod into the node; frames run on egress leave the node for a
/// CoreDNS pod.
const CLIENT_NS: u32 = 3;

const NODE_NS: u32 = 1;

const COREDNS_NS: u32 = 2;

/// The node's address, which userspace registers as serving DNS (node-local-dns forwards from
/// it).
const NODE_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);

/// The node-local cache's forward of `name`, with its own ID and DNS 0x20 case.
fn forward_frame(id: u16, name: &str) -> Vec<u8> {
    FrameSpec {
        src: IpAddr::V4(NODE_ADDRESS),
        payload: dns_query(id, &name.to_ascii_uppercase(), QTYPE_A),
        ..FrameSpec::default()
    }
    .build()
}

/// CoreDNS, which the node sent the question to, sending it back into the node-local cache.
fn sent_back_frame(id: u16, name: &str) -> Vec<u8> {
    FrameSpec {
        src: FrameSpec::default().dst,
        dst: IpAddr::V4(Ipv4Addr::new(169, 254, 25, 10)),
        payload: dns_query(id, name, QTYPE_A),
        ..FrameSpec::default()
    }
    .build()
}

/// Loads the programs of `build` with the test runs' points placed as a node's (see
/// `CLIENT_NS`).
fn node_kernel(build: Build) -> Option<Kernel> {
    let mut kernel = Kernel::load(with_build(&trace_settings(), build))?;
    kernel.place(Direction::Ingress, CLIENT_NS, NODE_NS);
    kernel.place(Direction::Egress, NODE_NS, COREDNS_NS);
    programs::register_forwarders(&mut kernel.ebpf, &[IpAddr::V4(NODE_ADDRESS)])
        .expect("registering the node's address");
    Some(kernel)
}

#[test]
fn a_popular_question_forwarded_for_many_clients_is_not_streamed() {
    for_each_build(node_kernel, |mut kernel| {
        for id in 0..50 {
            kernel.run(
                Direction::Ingress,
                &query_frame(id, "www.example.test", QTYPE_A),
            );
            kernel.run(
                Direction::Egress,
                &forward_frame(1000 + id, "www.example.test"),
            );
            if id % 3 == 0 {
                // Some forwards are answered, others are still out when the next one goes.
                kernel.run(
                    Direction::Ingress,
                    &answer_frame(1000 + id, "www.example.test", QTYPE_A, 0),
                );
            }
        }
        kernel.assert_streamed(&[]);
    });
}

#[test]
fn a_forward_coming_back_into_the_forwarder_is_streamed_from_then_on() {
    for_each_build(node_kernel, |mut kernel| {
        let client_query = query_frame(0x1001, "www.example.test", QTYPE_A);
        let forwarded = forward_frame(0x2002, "www.example.test");
        let coming_back = sent_back_frame(0x3003, "www.example.test");
        // The same name with another type is another question.
        let other_question = query_frame(0x4004, "www.example.test", QTYPE_AAAA);

        let before = monotonic_now_ns();
        kernel.run(Direction::Ingress, &client_query);
        kernel.run(Direction::Egress, &forwarded);
        kernel.run(Direction::Ingress, &coming_back);
        kernel.run(Direction::Egress, &forwarded);
        kernel.run(Direction::Egress, &other_question);
        let after = monotonic_now_ns();

        // The question coming back, and every sighting after it; not the other question.
        let records = kernel.assert_streamed(&[
            (&coming_back, Direction::Ingress, StreamReason::HotQuestion),
            (&forwarded, Direction::Egress, StreamReason::HotQuestion),
        ]);
        for record in &records {
            assert!(
                (before..=after).contains(&record.record.ts_ns),
                "records are stamped with CLOCK_MONOTONIC: {} is not in {before}..={after}",
                record.record.ts_ns
            );
        }
        assert!(records[0].record.ts_ns <= records[1].record.ts_ns);
        let priors: Vec<(u16, u8)> = records[0]
            .priors()
            .iter()
            .map(|prior| (prior.id, prior.direction))
            .collect();
        assert_eq!(
            priors,
            [
                (0x1001, Direction::Ingress as u8),
                (0x2002, Direction::Egress as u8)
            ],
            "the record that made it hot carries the round before it, oldest first"
        );
        assert_eq!(kernel.counts().get(Counter::StreamedRecords), 2);
    });
}

/// The test frames' destination and source MACs (`dnsloop_frames::link_header`).
const FRAME_DESTINATION_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

const FRAME_SOURCE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

#[test]
fn a_loop_through_a_bridge_is_followed_at_its_ports_alone() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Bridge ports: alone, a frame leaves (ingress) or enters (egress) the pod; sent to the
        // bridge, or by it, the node too.
        kernel.place(Direction::Ingress, CLIENT_NS, 0);
        kernel.place(Direction::Egress, 0, COREDNS_NS);
        kernel.place_gateway(
            Direction::Ingress,
            FRAME_DESTINATION_MAC,
            CLIENT_NS,
            NODE_NS,
        );
        kernel.place_gateway(Direction::Egress, FRAME_SOURCE_MAC, NODE_NS, COREDNS_NS);
        programs::register_forwarders(&mut kernel.ebpf, &[IpAddr::V4(NODE_ADDRESS)])
            .expect("registering the node's address");
        let to_another_port = |frame: &[u8]| {
            let mut frame = frame.to_vec();
            frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x09]);
            frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x08]);
            frame
        };
        let client_query = query_frame(0x1001, "www.example.test", QTYPE_A);
        let forwarded = forward_frame(0x2002, "www.example.test");
        let coming_back = sent_back_frame(0x3003, "www.example.test");

        // Passing the bridge from port to port, nothing enters the node: no loop.
        kernel.run(Direction::Ingress, &to_another_port(&client_query));
        kernel.run(Direction::Egress, &to_another_port(&forwarded));
        kernel.run(Direction::Ingress, &to_another_port(&coming_back));
        kernel.assert_streamed(&[]);

        let client_query = query_frame(0x1004, "www.example.org", QTYPE_A);
        let forwarded = forward_frame(0x2005, "www.example.org");
        let coming_back = sent_back_frame(0x3006, "www.example.org");
        kernel.run(Direction::Ingress, &client_query);
        kernel.run(Direction::Egress, &forwarded);
        kernel.run(Direction::Ingress, &coming_back);
        let records = kernel.assert_streamed(&[(
            &coming_back,
            Direction::Ingress,
            StreamReason::HotQuestion,
        )]);
        assert_eq!(
            records[0].record.via_gateway, 1,
            "it came back into the node"
        );
        let priors: Vec<(u16, u8)> = records[0]
            .priors()
            .iter()
            .map(|prior| (prior.id, prior.via_gateway))
            .collect();
        assert_eq!(
            priors,
            [(0x1004, 1), (0x2005, 1)],
            "the round before it, each sighting through the node"
        );
    });
}
