//! The real kernel programs, loaded as `dnsloop trace` loads them, run on crafted frames with
//! `BPF_PROG_TEST_RUN`: what they count, what they stream to userspace, and that they hand every
//! frame on untouched.
//!
//! Each test loads programs of its own, so its maps start empty and the counts it checks are
//! exact. The kernel runs a test frame on the loopback device of the calling thread's namespace
//! (no `ifindex` is given in the context), so records name loopback and that namespace's cookie.
use std::{
    net::{IpAddr, Ipv4Addr},
    time::Duration,
};

use aya::{
    maps::{MapData, PerCpuArray, RingBuf},
    Ebpf, TestRun as _, TestRunOptions,
};
use dnsloop_ebpf::{
    counter::Counter,
    drop::DropLayout,
    names::{EGRESS_PROGRAM, INGRESS_PROGRAM, POINT_COUNTERS_MAP},
    parse::{LinkLayer, Malformed, Transport},
    point::{
        mac_word, Direction, ObservationPoint, PointCounters, PointNamespaces, PointSlot,
        POINT_SLOTS,
    },
    record::{PacketRecord, StreamReason, PACKET_SNAP_MAX},
};
use dnsloop_frames::*;

use dnsloop_tests::privilege::{self, Need};

use dnsloop_core::points::KernelPoint;

use crate::{
    kernel::{
        clock::{monotonic_now_ns, MonotonicClock},
        counters::{read_global, GlobalCounts},
        point_table::{self, ethernet_point, PointTable},
        programs::{self, Build, Settings},
        unanswered::UnansweredQueries,
    },
    node::namespaces,
};

/// `TC_ACT_UNSPEC` (-1) as the kernel reports a program's return value: "carry on", the only
/// verdict the programs ever give.
const TC_ACT_UNSPEC: u32 = u32::MAX;
/// The only verdict the XDP program gives: on to the stack.
const XDP_PASS: u32 = 2;
/// Every network namespace gives its loopback this index.
const LOOPBACK_IFINDEX: u32 = 1;
const QTYPE_AAAA: u16 = 28;
const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_VLAN: u16 = 0x8100;

// --- counting -------------------------------------------------------------------------------

#[test]
fn a_dns_query_is_counted_and_handed_on_unchanged() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = FrameSpec::default().build();

        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &query);

        assert_eq!(kernel.counts(), dns_packets_of_one_message(2));
        let one_dns_packet = PointCounters {
            packets: 1,
            dns_packets: 1,
        };
        assert_eq!(kernel.point_counters(Direction::Ingress), one_dns_packet);
        assert_eq!(kernel.point_counters(Direction::Egress), one_dns_packet);
    });
}

#[test]
fn the_xdp_program_counts_a_dns_query_and_passes_it_on_unchanged() {
    let Some(mut kernel) = Kernel::load(Settings {
        xdp_ingress: true,
        ..trace_settings()
    }) else {
        return;
    };
    // XDP never sees a socket, so its loopback point carries no namespace cookie.
    kernel.points.push(ethernet_point(ObservationPoint::new(
        0,
        LOOPBACK_IFINDEX,
        Direction::Ingress as u8,
    )));
    kernel.sync_points();
    let frame = query_frame(0x1234, "www.example.test", QTYPE_A);
    let program = programs::xdp(&mut kernel.ebpf).expect("the XDP program is loaded");
    let mut data_out = vec![0; frame.len() + 64];
    let result = program
        .test_run(TestRunOptions {
            data_in: Some(&frame),
            data_out: Some(&mut data_out),
            ..TestRunOptions::default()
        })
        .unwrap_or_else(|error| panic!("BPF_PROG_TEST_RUN: {:#}", anyhow::Error::from(error)));
    assert_eq!(result.return_value, XDP_PASS, "the frame is passed on");
    assert_eq!(
        &data_out[..result.data_size_out as usize],
        frame,
        "unchanged"
    );
    assert_eq!(kernel.counts(), dns_packets_of_one_message(1));
}

#[test]
fn frames_that_are_not_dns_count_only_as_packets_even_when_every_packet_is_asked_for() {
    for_each_build(loaded(every_packet(PACKET_SNAP_MAX)), |mut kernel| {
        // A DNS message on another port is not DNS: the port decides.
        let http_port = FrameSpec {
            dport: 80,
            ..FrameSpec::default()
        };
        let https_over_tcp = FrameSpec {
            dport: 443,
            ..FrameSpec::default()
        }
        .tcp();
        let mut arp = link_header(LinkLayer::Ethernet, 0, ETHERTYPE_ARP);
        arp.extend_from_slice(&[0; 28]);
        // Two tags are walked, a third is not: here VLAN 102 in front of IPv4.
        let mut three_vlan_tags = link_header(LinkLayer::Ethernet, 2, ETHERTYPE_VLAN);
        three_vlan_tags.extend_from_slice(&[0, 102, 0x08, 0x00]);
        three_vlan_tags.extend_from_slice(&FrameSpec::default().ip_packet());

        for frame in [
            http_port.build(),
            https_over_tcp.build(),
            arp,
            three_vlan_tags,
        ] {
            kernel.run(Direction::Ingress, &frame);
        }

        assert_eq!(kernel.counts(), counted(&[(Counter::Packets, 4)], &[]));
        assert_eq!(
            kernel.point_counters(Direction::Ingress),
            PointCounters {
                packets: 4,
                dns_packets: 0
            }
        );
        kernel.assert_streamed(&[]);
    });
}

#[test]
fn malformed_frames_are_counted_by_reason() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let valid = FrameSpec::default();
        let udp_start = valid.link_header_len() + 20;
        // BPF_PROG_TEST_RUN refuses a frame that ends inside the fixed IPv4 header, so this one
        // ends inside the options its header length announces.
        let with_options = FrameSpec {
            ipv4_options: vec![1; 40],
            ..FrameSpec::default()
        };
        let truncated_ipv4 = with_options.build()[..with_options.link_header_len() + 30].to_vec();
        let mut udp_length_below_its_header = valid.build();
        udp_length_below_its_header[udp_start + 4..udp_start + 6]
            .copy_from_slice(&4u16.to_be_bytes());
        let short_dns_header = FrameSpec {
            payload: vec![0x12, 0x34, 0x01, 0x00, 0x00],
            ..FrameSpec::default()
        };
        // A pointer to the header, where a query's first question must spell its name out.
        let pointer_in_question = FrameSpec {
            payload: dns_query_wire(0x1234, &[0xc0, 0x0c], QTYPE_A),
            ..FrameSpec::default()
        };

        // The sampling of malformed packets is per CPU: all four must run on the same one.
        stay_on_one_cpu();
        for frame in [
            &truncated_ipv4,
            &udp_length_below_its_header,
            &short_dns_header.build(),
            &pointer_in_question.build(),
        ] {
            kernel.run(Direction::Ingress, frame);
        }

        assert_eq!(
            kernel.counts(),
            counted(
                &[(Counter::Packets, 4), (Counter::StreamedRecords, 1)],
                &[
                    (Malformed::TruncatedIpv4, 1),
                    (Malformed::BadUdpLength, 1),
                    (Malformed::DnsTruncatedHeader, 1),
                    (Malformed::DnsCompressionPointer, 1),
                ]
            )
        );
        assert_eq!(kernel.point_counters(Direction::Ingress).dns_packets, 0);
        // Every one is counted; the first is shown as a sample, the others came too soon after it.
        kernel.assert_streamed(&[(&truncated_ipv4, Direction::Ingress, StreamReason::Malformed)]);
    });
}

/// Pins the calling test thread to the CPU it is on, so that every program it runs sees the
/// same per-CPU state.
fn stay_on_one_cpu() {
    // SAFETY: sched_getcpu has no preconditions; the set is a plain bitmask we own.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(
            cpu >= 0,
            "sched_getcpu: {}",
            std::io::Error::last_os_error()
        );
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let pinned = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            pinned,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn non_first_fragments_are_counted_apart_and_first_fragments_parsed() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // 185 eight-byte units: where the second fragment of a 1500-byte MTU datagram starts.
        let ipv4_later_fragment = FrameSpec {
            ipv4_fragment: (185, false),
            ..FrameSpec::default()
        };
        let ipv6_later_fragment = FrameSpec {
            ipv6_extensions: vec![ExtensionHeader::Fragment {
                offset: 185,
                more: false,
            }],
            ..FrameSpec::default().ipv6()
        };
        let ipv4_first_fragment = FrameSpec {
            ipv4_fragment: (0, true),
            ..FrameSpec::default()
        };

        for spec in [
            ipv4_later_fragment,
            ipv6_later_fragment,
            ipv4_first_fragment,
        ] {
            kernel.run(Direction::Ingress, &spec.build());
        }

        assert_eq!(
            kernel.counts(),
            counted(
                &[
                    (Counter::Packets, 3),
                    (Counter::NonFirstFragments, 2),
                    (Counter::DnsPackets, 1),
                    (Counter::DnsMessages, 1),
                ],
                &[]
            )
        );
    });
}

// --- what is streamed to userspace ----------------------------------------------------------

#[test]
fn a_query_and_its_retries_with_the_same_id_are_only_counted() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(0x1001, "www.example.test", QTYPE_A);

        // The client's first try, its retry, and the query crossing a second hop unchanged.
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &query);

        kernel.assert_streamed(&[]);
        assert_eq!(kernel.counts().get(Counter::DnsMessages), 3);
    });
}

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
                (before..=after).contains(&record.ts_ns),
                "records are stamped with CLOCK_MONOTONIC: {} is not in {before}..={after}",
                record.ts_ns
            );
        }
        assert!(records[0].ts_ns <= records[1].ts_ns);
        let priors: Vec<(u16, u8)> = records[0]
            .priors
            .iter()
            .filter(|prior| prior.family != 0)
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
        assert_eq!(records[0].via_gateway, 1, "it came back into the node");
        let priors: Vec<(u16, u8)> = records[0]
            .priors
            .iter()
            .filter(|prior| prior.family != 0)
            .map(|prior| (prior.id, prior.via_gateway))
            .collect();
        assert_eq!(
            priors,
            [(0x1004, 1), (0x2005, 1)],
            "the round before it, each sighting through the node"
        );
    });
}

#[test]
fn a_query_sent_again_unanswered_is_streamed_with_its_first_sending_and_so_is_its_answer() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(0x4242, "www.example.test", QTYPE_A);
        let answer = FrameSpec {
            src: FrameSpec::default().dst,
            dst: FrameSpec::default().src,
            sport: 53,
            dport: 40000,
            payload: dns_response(0x4242, "www.example.test", QTYPE_A),
            ..FrameSpec::default()
        }
        .build();

        let first = monotonic_now_ns();
        kernel.run(Direction::Ingress, &query);
        // Met again at once: the same query, not a retry (a client waits before it resends).
        kernel.run(Direction::Ingress, &query);
        std::thread::sleep(Duration::from_millis(250));
        // The client's retry: same socket, same ID, no answer yet.
        kernel.run(Direction::Ingress, &query);
        // The answer at last, back where the query left.
        kernel.run(Direction::Egress, &answer);

        let records = kernel.assert_streamed(&[
            (&query, Direction::Ingress, StreamReason::Retried),
            (&answer, Direction::Egress, StreamReason::Retried),
        ]);
        let sent = &records[0].matched_query;
        assert!(
            sent.first_ns >= first && records[0].ts_ns - sent.first_ns >= 200_000_000,
            "the retry carries the first sending: {sent:?}"
        );
        assert_eq!(
            (&sent.server[..4], sent.server_port),
            (&[10, 96, 0, 10][..], 53)
        );
        assert_eq!(
            records[1].matched_query.first_ns, 0,
            "the answer carries no query"
        );
    });
}

// --- the query table ----------------------------------------------------------------------

/// The answer to `query_frame(id, name, qtype)`, with `rcode`, back to the client.
fn answer_frame(id: u16, name: &str, qtype: u16, rcode: u8) -> Vec<u8> {
    let mut payload = dns_response(id, name, qtype);
    payload[3] = (payload[3] & 0xf0) | rcode;
    FrameSpec {
        src: FrameSpec::default().dst,
        dst: FrameSpec::default().src,
        sport: 53,
        dport: 40000,
        payload,
        ..FrameSpec::default()
    }
    .build()
}

#[test]
fn a_query_never_answered_is_collected_with_its_question_once_it_expires() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(0x5151, "Corp.Example", QTYPE_AAAA),
        );
        let mut unanswered = kernel.unanswered_queries();
        let mut expired = Vec::new();
        unanswered
            .take_expired(Duration::from_secs(60), &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "not expired yet: {expired:?}");

        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        let [query] = expired.as_slice() else {
            panic!("one unanswered query: {expired:?}");
        };
        assert_eq!(
            query.name.presentation(),
            "Corp.Example.",
            "as sent, case kept"
        );
        assert_eq!((query.qtype, query.qclass), (QTYPE_AAAA, QCLASS_IN));
        assert_eq!(query.id, 0x5151);
        assert_eq!(query.client, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(query.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(
            (query.seen.interface.ifindex, query.seen.direction),
            (LOOPBACK_IFINDEX, Direction::Ingress)
        );
        assert!(!query.tcp);

        expired.clear();
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "each is collected once: {expired:?}");
    });
}

/// The table is read many entries per call: a table of thousands, as when an upstream is dead,
/// comes back whole, oldest first.
#[test]
fn every_query_of_a_large_table_is_collected_once_oldest_first() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        const QUERIES: u16 = 2000;
        for id in 0..QUERIES {
            kernel.run(
                Direction::Ingress,
                &query_frame(id, &format!("host{id}.example"), QTYPE_A),
            );
        }
        let mut unanswered = kernel.unanswered_queries();
        let mut expired = Vec::new();

        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");

        let ids: Vec<u16> = expired.iter().map(|query| query.id).collect();
        assert_eq!(ids, (0..QUERIES).collect::<Vec<_>>());
        expired.clear();
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "each is collected once");
    });
}

/// A query from before the run (pinned by an earlier one, `--pin`) that expires is counted but
/// not reported: its answer may have come while no program watched.
#[test]
fn a_query_from_before_the_run_expires_unreported() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(0x5152, "before.example", QTYPE_AAAA),
        );
        let table =
            programs::take_queries(&mut kernel.ebpf).expect("the programs have a query table");
        let mut unanswered =
            UnansweredQueries::new(table, MonotonicClock::anchored_now(), monotonic_now_ns());
        let mut expired = Vec::new();
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "not reported: {expired:?}");
        assert_eq!(unanswered.expired_from_before, 1);
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert_eq!(unanswered.expired_from_before, 1, "taken out of the table");
    });
}

#[test]
fn an_answered_query_leaves_the_table_and_counts_for_its_server() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // The query's direction, its ID, name and answer's rcode. Test runs are seen on loopback,
        // watched on egress only: there a reply reaches its client in the same direction as the
        // query left (the last).
        for (asked, id, name, rcode) in [
            (Direction::Ingress, 1, "www.example.test", 0),
            (Direction::Ingress, 2, "nx.example.test", 3),
            (Direction::Egress, 3, "lo.example.test", 0),
        ] {
            kernel.run(asked, &query_frame(id, name, QTYPE_A));
            kernel.run(Direction::Egress, &answer_frame(id, name, QTYPE_A, rcode));
        }

        let mut expired = Vec::new();
        kernel
            .unanswered_queries()
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "every query was answered: {expired:?}");

        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        let [server] = servers.as_slice() else {
            panic!("one server: {servers:?}");
        };
        assert_eq!(server.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(server.answered, 3);
        assert_eq!(
            server.rcodes,
            [(0, 2), (3, 1)].into_iter().collect(),
            "NOERROR twice, NXDOMAIN once"
        );
        assert!(server.max > Duration::ZERO && server.p50 <= server.max);
    });
}

/// A packet crossing a bridge is seen twice in a row on one CPU (at the port and at the bridge),
/// and the second sighting takes the query table's answer from the first.
#[test]
fn a_packet_seen_again_further_on_leaves_its_query_as_the_first_sighting_left_it() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(4, "www.example.test", QTYPE_A);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &query);
        let mut expired = Vec::new();
        kernel
            .unanswered_queries()
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        let [unanswered] = expired.as_slice() else {
            panic!("one query in flight: {expired:?}");
        };
        assert_eq!(
            unanswered.seen.direction,
            Direction::Ingress,
            "first seen there"
        );

        // Loopback's reply reaches its client at once (see the test above); seen again, it finds
        // the query answered.
        kernel.run(
            Direction::Egress,
            &query_frame(5, "www.example.test", QTYPE_A),
        );
        let answer = answer_frame(5, "www.example.test", QTYPE_A, 0);
        kernel.run(Direction::Egress, &answer);
        kernel.run(Direction::Ingress, &answer);
        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        let [server] = servers.as_slice() else {
            panic!("one server: {servers:?}");
        };
        assert_eq!(server.answered, 1, "one answer, seen twice");
    });
}

#[test]
fn a_reply_from_elsewhere_is_not_counted_as_its_servers_answer() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(9, "www.example.test", QTYPE_A),
        );
        let from_pod = FrameSpec {
            src: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 3)),
            dst: FrameSpec::default().src,
            sport: 53,
            dport: 40000,
            payload: dns_response(9, "www.example.test", QTYPE_A),
            ..FrameSpec::default()
        }
        .build();
        kernel.run(Direction::Egress, &from_pod);
        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        assert!(servers.is_empty(), "the client drops it: {servers:?}");
    });
}

/// A packet seen again at the next point is not parsed again (see `a_dns_query_is_counted_...`,
/// whose second sighting is counted all the same); another message from the same socket right
/// after, with another ID, is parsed for itself.
#[test]
fn the_next_message_from_a_socket_is_parsed_for_itself_even_at_once() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // As long as the probe, so that only the ID tells them apart.
        let query = query_frame(0x0301, "abcd.efgh.cluster.local.", QTYPE_HINFO);
        let probe = query_frame(0x0302, "1234.5678.cluster.local.", QTYPE_HINFO);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &probe);
        kernel.assert_streamed(&[(&probe, Direction::Egress, StreamReason::Probe)]);
    });
}

#[test]
fn loop_probes_are_streamed_and_near_misses_are_not() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let coredns_probe = query_frame(0x0101, "1234.5678.cluster.local.", QTYPE_HINFO);
        let dnsmasq_probe = query_frame(0x0102, "deadbeef.test.", QTYPE_TXT);
        let near_misses = [
            query_frame(0x0201, "1234.abcd.cluster.local.", QTYPE_HINFO),
            query_frame(0x0202, "1234.cluster.local.", QTYPE_HINFO),
            query_frame(0x0203, "1234.5678.cluster.local.", QTYPE_A),
            query_frame(0x0204, "deadbee.test.", QTYPE_TXT),
            query_frame(0x0205, "deadbeeg.test.", QTYPE_TXT),
            query_frame(0x0206, "deadbeef.example.", QTYPE_TXT),
            query_frame(0x0207, "deadbeef.test.", QTYPE_A),
        ];

        kernel.run(Direction::Ingress, &coredns_probe);
        for frame in &near_misses {
            kernel.run(Direction::Ingress, frame);
        }
        kernel.run(Direction::Ingress, &dnsmasq_probe);

        kernel.assert_streamed(&[
            (&coredns_probe, Direction::Ingress, StreamReason::Probe),
            (&dnsmasq_probe, Direction::Ingress, StreamReason::Probe),
        ]);
    });
}

#[test]
fn a_packet_too_long_to_be_read_in_place_is_read_with_the_helper() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Past the programs' in-place limit (2048 bytes) and within what a test run takes (a page):
        // a probe followed by records the programs do not read.
        let mut payload = dns_query(0x0103, "1234.5678.cluster.local.", QTYPE_HINFO);
        payload.resize(2400, 0);
        let long_probe = FrameSpec {
            payload,
            ..FrameSpec::default()
        }
        .build();

        kernel.run(Direction::Ingress, &long_probe);

        assert_eq!(kernel.counts(), one_streamed_dns_packet(1));
        kernel.assert_streamed(&[(&long_probe, Direction::Ingress, StreamReason::Probe)]);
    });
}

#[test]
fn every_packet_mode_streams_every_dns_packet_cut_at_the_snap_length() {
    const SNAP_LEN: usize = 64;
    for_each_build(loaded(every_packet(SNAP_LEN)), |mut kernel| {
        let query = query_frame(0x4242, "www.example.test", QTYPE_A);
        let response = FrameSpec {
            src: FrameSpec::default().dst,
            dst: FrameSpec::default().src,
            sport: 53,
            dport: 40000,
            payload: dns_response(0x4242, "www.example.test", QTYPE_A),
            ..FrameSpec::default()
        }
        .build();
        let shorter_than_the_snap_length = query_frame(0x4343, "a.b", QTYPE_A);
        assert!(query.len() > SNAP_LEN && shorter_than_the_snap_length.len() < SNAP_LEN);

        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &response);
        kernel.run(Direction::Ingress, &shorter_than_the_snap_length);

        kernel.assert_streamed(&[
            (&query, Direction::Ingress, StreamReason::EveryPacket),
            (&response, Direction::Egress, StreamReason::EveryPacket),
            (
                &shorter_than_the_snap_length,
                Direction::Ingress,
                StreamReason::EveryPacket,
            ),
        ]);
    });
}

// --- TCP, IPv6, VLANs, raw IP ----------------------------------------------------------------

#[test]
fn a_tcp_segment_with_two_messages_has_both_parsed() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Only the second message is a probe: the segment is streamed only if it was parsed too.
        let ordinary = dns_query(0x0001, "www.example.test", QTYPE_A);
        let probe = dns_query(0x0002, "1234.5678.cluster.local", QTYPE_HINFO);
        let segment = tcp_frame(tcp_stream(&[&ordinary, &probe]));

        kernel.run(Direction::Ingress, &segment);

        assert_eq!(kernel.counts(), one_streamed_dns_packet(2));
        kernel.assert_streamed(&[(&segment, Direction::Ingress, StreamReason::Probe)]);
    });
}

#[test]
fn a_tcp_segment_with_more_messages_than_inspected_says_so() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let messages: Vec<Vec<u8>> = (0..5)
            .map(|index| dns_query(index, &format!("pipelined-{index}.example.test"), QTYPE_A))
            .collect();
        let messages: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();

        kernel.run(Direction::Ingress, &tcp_frame(tcp_stream(&messages)));

        assert_eq!(
            kernel.counts(),
            counted(
                &[
                    (Counter::Packets, 1),
                    (Counter::DnsPackets, 1),
                    (Counter::DnsMessages, 4),
                    (Counter::TcpMessagesBeyondLimit, 1),
                ],
                &[]
            )
        );
    });
}

#[test]
fn a_tcp_message_continuing_in_the_next_segment_is_streamed_as_split() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // A message longer than the segment: its question is in this segment, the rest (here
        // padding, as an EDNS option would be) in the next.
        let mut message = dns_query(0x5151, "www.example.test", QTYPE_A);
        message.extend_from_slice(&[0; 100]);
        let stream = tcp_stream(&[&message]);
        let first_segment = tcp_frame(stream[..stream.len() - 60].to_vec());

        kernel.run(Direction::Ingress, &first_segment);

        assert_eq!(
            kernel.counts(),
            counted(
                &[
                    (Counter::Packets, 1),
                    (Counter::DnsPackets, 1),
                    (Counter::DnsMessages, 1),
                    (Counter::TcpSplits, 1),
                    (Counter::StreamedRecords, 1),
                ],
                &[]
            )
        );
        kernel.assert_streamed(&[(&first_segment, Direction::Ingress, StreamReason::TcpSplit)]);
    });
}

// Some clients write the 2-byte length and the message separately, which can put them in two
// segments; a small MSS can end a segment inside the question. Neither segment is malformed.

#[test]
fn a_tcp_segment_holding_only_a_length_prefix_is_streamed_as_split() {
    assert_first_segment_is_streamed_as_split(2);
}

#[test]
fn a_tcp_segment_ending_inside_the_question_is_streamed_as_split() {
    assert_first_segment_is_streamed_as_split(2 + 12 + 5);
}

/// Runs a segment holding the first `len` bytes of the TCP stream of a query, and checks that
/// it is a split, streamed as such, and not malformed.
fn assert_first_segment_is_streamed_as_split(len: usize) {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let message = dns_query(0x5252, "www.example.test", QTYPE_A);
        let first_segment = tcp_frame(tcp_stream(&[&message])[..len].to_vec());

        kernel.run(Direction::Ingress, &first_segment);

        let counts = kernel.counts();
        assert_eq!(counts.get(Counter::TcpSplits), 1, "{counts:?}");
        assert_eq!(
            counts.malformed,
            [],
            "the segment of a valid stream is not malformed"
        );
        kernel.assert_streamed(&[(&first_segment, Direction::Ingress, StreamReason::TcpSplit)]);
    });
}

#[test]
fn ipv6_through_extension_headers_is_parsed() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let udp = FrameSpec {
            ipv6_extensions: vec![
                ExtensionHeader::HopByHop,
                ExtensionHeader::DestinationOptions,
                ExtensionHeader::Fragment {
                    offset: 0,
                    more: false,
                },
            ],
            ..FrameSpec::default().ipv6()
        };
        let tcp = FrameSpec {
            ipv6_extensions: vec![ExtensionHeader::Routing, ExtensionHeader::Authentication],
            ..FrameSpec::default().ipv6().tcp()
        };

        kernel.run(Direction::Ingress, &udp.build());
        kernel.run(Direction::Egress, &tcp.build());

        assert_eq!(kernel.counts(), dns_packets_of_one_message(2));
    });
}

#[test]
fn vlan_tagged_frames_are_parsed() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let single_tag = FrameSpec {
            vlan_tags: 1,
            ..FrameSpec::default()
        };
        let double_tag_ipv6 = FrameSpec {
            vlan_tags: 2,
            ..FrameSpec::default().ipv6()
        };

        kernel.run(Direction::Ingress, &single_tag.build());
        kernel.run(Direction::Ingress, &double_tag_ipv6.build());

        assert_eq!(kernel.counts(), dns_packets_of_one_message(2));
    });
}

#[test]
fn frames_of_an_interface_without_ethernet_are_parsed_from_the_ip_header() {
    for_each_build(loaded(every_packet(PACKET_SNAP_MAX)), |mut kernel| {
        kernel.register_loopback_as_raw_ip();
        let raw_ip = raw_ip_frame();

        kernel.run(Direction::Ingress, &raw_ip);

        assert_eq!(kernel.counts().get(Counter::DnsMessages), 1);
        kernel.assert_streamed(&[(&raw_ip, Direction::Ingress, StreamReason::EveryPacket)]);
    });
}

#[test]
fn a_point_is_found_past_others_holding_its_first_probes() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Points of the node's interfaces homed at the test point's first three probes (an index
        // past half the slots wraps around to the same slot, and is not 0, which marks a free one).
        let ingress = test_point(Direction::Ingress);
        let holders = (0..3).map(|probe| {
            let slot = PointSlot::index(&ingress, probe);
            ethernet_point(ObservationPoint::new(
                0,
                slot / 2 + POINT_SLOTS / 2,
                (slot % 2) as u8,
            ))
        });
        let test_points = std::mem::take(&mut kernel.points);
        kernel.points = holders.chain(test_points).collect();
        kernel.register_loopback_as_raw_ip();

        kernel.run(Direction::Ingress, &raw_ip_frame());

        assert_eq!(kernel.counts().get(Counter::DnsMessages), 1);
        assert_eq!(kernel.point_counters(Direction::Ingress).dns_packets, 1);
    });
}

#[test]
fn packets_at_a_point_not_in_the_table_are_parsed_and_counted_as_unplaced() {
    for_each_build(unplaced(trace_settings()), |mut kernel| {
        kernel.run(Direction::Ingress, &FrameSpec::default().build());

        assert_eq!(
            kernel.counts(),
            counted(
                &[
                    (Counter::Packets, 1),
                    (Counter::DnsPackets, 1),
                    (Counter::DnsMessages, 1),
                    (Counter::UnplacedPackets, 1),
                ],
                &[],
            )
        );
    });
}

// --- helpers --------------------------------------------------------------------------------

/// A query frame of an interface without Ethernet: it starts at the IP header.
fn raw_ip_frame() -> Vec<u8> {
    FrameSpec {
        link: LinkLayer::RawIp,
        ..FrameSpec::default()
    }
    .build()
}

/// Runs `check` on the programs of every build, each loaded by `load`: on this kernel, which
/// takes both, the build for kernels before 5.17 must find what the other finds. Nothing runs
/// where the calling test cannot (see `can_run`).
fn for_each_build(load: impl Fn(Build) -> Option<Kernel>, check: impl Fn(Kernel)) {
    for build in Build::ALL {
        let Some(kernel) = load(build) else {
            return;
        };
        check(kernel);
    }
}

/// Loads a build's programs with `settings`.
fn loaded(settings: Settings) -> impl Fn(Build) -> Option<Kernel> {
    move |build| Kernel::load(with_build(&settings, build))
}

/// Loads a build's programs with `settings`, telling them no point.
fn unplaced(settings: Settings) -> impl Fn(Build) -> Option<Kernel> {
    move |build| Kernel::load_unplaced(with_build(&settings, build))
}

fn with_build(settings: &Settings, build: Build) -> Settings {
    Settings {
        build: Some(build),
        ..settings.clone()
    }
}

/// What `dnsloop trace` loads without `--packets`.
fn trace_settings() -> Settings {
    Settings {
        dns_ports: vec![53],
        stream_every_packet: false,
        snap_len: PACKET_SNAP_MAX,
        question_table_size: 65536,
        query_table_size: 65536,
        ring_buffer_mib: 4,
        xdp_ingress: false,
        watch_drops: false,
        build: None,
    }
}

/// What `dnsloop trace --packets --snap-len SNAP_LEN` loads.
fn every_packet(snap_len: usize) -> Settings {
    Settings {
        stream_every_packet: true,
        snap_len,
        ..trace_settings()
    }
}

/// An Ethernet/IPv4/UDP frame from a client to port 53 carrying a query.
fn query_frame(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    FrameSpec {
        payload: dns_query(id, name, qtype),
        ..FrameSpec::default()
    }
    .build()
}

/// An Ethernet/IPv4/TCP segment to port 53 whose payload is `stream`.
fn tcp_frame(stream: Vec<u8>) -> Vec<u8> {
    FrameSpec {
        transport: Transport::Tcp,
        payload: stream,
        ..FrameSpec::default()
    }
    .build()
}

/// The global counters after `packets` DNS packets of one message each, none of them streamed.
fn dns_packets_of_one_message(packets: u64) -> GlobalCounts {
    counted(
        &[
            (Counter::Packets, packets),
            (Counter::DnsPackets, packets),
            (Counter::DnsMessages, packets),
        ],
        &[],
    )
}

/// The global counters after one DNS packet of `messages` messages, streamed.
fn one_streamed_dns_packet(messages: u64) -> GlobalCounts {
    counted(
        &[
            (Counter::Packets, 1),
            (Counter::DnsPackets, 1),
            (Counter::DnsMessages, messages),
            (Counter::StreamedRecords, 1),
        ],
        &[],
    )
}

/// The global counters when only `counters` and `malformed` (in `Malformed::ALL` order) are
/// non-zero.
fn counted(counters: &[(Counter, u64)], malformed: &[(Malformed, u64)]) -> GlobalCounts {
    let value = |counter: Counter| {
        counters
            .iter()
            .find(|(candidate, _)| *candidate == counter)
            .map_or(0, |(_, value)| *value)
    };
    GlobalCounts {
        counters: Counter::ALL
            .iter()
            .map(|&counter| (counter, value(counter)))
            .collect(),
        malformed: malformed.to_vec(),
    }
}

/// Whether the calling test can load BPF programs, which needs root (see
/// `dnsloop_tests::privilege`).
fn can_run() -> bool {
    // The test harness names each test's thread after the test.
    let current = std::thread::current();
    privilege::can_run(current.name().unwrap_or("a kernel test"), &[Need::Root])
}

/// Programs loaded for one test, with their ring buffer.
struct Kernel {
    ebpf: Ebpf,
    records: RingBuf<MapData>,
    snap_len: usize,
    /// The points told to the programs: the test runs' own two first, as `dnsloop trace` tells
    /// the points it watches before it attaches there.
    points: Vec<KernelPoint>,
    table: PointTable,
}

impl Kernel {
    /// Loads the programs with `settings`; `None` when the calling test cannot run here (see
    /// `can_run`).
    fn load(settings: Settings) -> Option<Kernel> {
        if !can_run() {
            return None;
        }
        let mut ebpf = programs::load(&settings, None, &DropLayout::NONE).unwrap_or_else(|error| {
            panic!("loading the programs: {:#}", anyhow::Error::from(error))
        });
        let records = programs::take_records(&mut ebpf).expect("the programs have a ring buffer");
        let table = PointTable::read(&ebpf).expect("reading the point table");
        let points = [Direction::Ingress, Direction::Egress]
            .map(|direction| ethernet_point(test_point(direction)))
            .to_vec();
        let mut kernel = Kernel {
            ebpf,
            records,
            snap_len: settings.snap_len,
            points,
            table,
        };
        kernel.sync_points();
        Some(kernel)
    }

    /// Loads the programs as `load` does, but tells them no point.
    fn load_unplaced(settings: Settings) -> Option<Kernel> {
        let mut kernel = Self::load(settings)?;
        kernel.points.clear();
        kernel.sync_points();
        Some(kernel)
    }

    fn sync_points(&mut self) {
        let unplaced = self
            .table
            .sync(&mut self.ebpf, &self.points)
            .expect("writing the point table");
        assert_eq!(
            unplaced,
            [],
            "the point table has room for the test's points"
        );
    }

    /// Runs the program of `direction` on `frame` and checks that it handed the frame on as it
    /// came: the programs never drop, redirect or modify a packet.
    fn run(&mut self, direction: Direction, frame: &[u8]) {
        let name = match direction {
            Direction::Ingress => INGRESS_PROGRAM,
            Direction::Egress => EGRESS_PROGRAM,
        };
        let program = programs::classifier(&mut self.ebpf, name).expect("the program is loaded");
        // Room to spare, so that a grown packet shows as a length mismatch, not as ENOSPC.
        let mut data_out = vec![0; frame.len() + 64];
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut data_out),
                ..TestRunOptions::default()
            })
            .unwrap_or_else(|error| {
                panic!(
                    "BPF_PROG_TEST_RUN of {name}: {:#}",
                    anyhow::Error::from(error)
                )
            });
        assert_eq!(
            result.return_value, TC_ACT_UNSPEC,
            "{name} returned another verdict"
        );
        assert_eq!(
            &data_out[..result.data_size_out as usize],
            frame,
            "{name} changed the frame"
        );
    }

    /// Tells the programs which namespaces the test runs' frames in `direction` leave and enter.
    fn place(&mut self, direction: Direction, leaves: u32, enters: u32) {
        let point = test_point(direction);
        for known in self.points.iter_mut().filter(|known| known.point == point) {
            known.namespaces = PointNamespaces { leaves, enters };
        }
        self.sync_points();
    }

    /// Tells the programs that the test runs' frames in `direction` sent to (ingress) or by
    /// (egress) `mac` leave and enter these namespaces.
    fn place_gateway(&mut self, direction: Direction, mac: [u8; 6], leaves: u32, enters: u32) {
        let point = test_point(direction);
        for known in self.points.iter_mut().filter(|known| known.point == point) {
            known.gateway_mac = mac_word(mac);
            known.via_gateway = PointNamespaces { leaves, enters };
        }
        self.sync_points();
    }

    /// The query table, as `dnsloop trace` collects it.
    fn unanswered_queries(&mut self) -> UnansweredQueries {
        let table =
            programs::take_queries(&mut self.ebpf).expect("the programs have a query table");
        // Every query in the table is this run's.
        UnansweredQueries::new(table, MonotonicClock::anchored_now(), 0)
    }

    fn counts(&self) -> GlobalCounts {
        read_global(&self.ebpf).expect("reading the global counters")
    }

    /// The counters of loopback in `direction`, where test runs are seen.
    fn point_counters(&self, direction: Direction) -> PointCounters {
        let map = self
            .ebpf
            .map(POINT_COUNTERS_MAP)
            .expect("the programs have point counters");
        let counters: PerCpuArray<_, PointCounters> =
            PerCpuArray::try_from(map).expect("point counters are a per-CPU array");
        let slot = point_table::find_in_kernel(&self.ebpf, &test_point(direction))
            .expect("searching the point table")
            .unwrap_or_else(|| panic!("loopback {direction:?} is in the point table"));
        let per_cpu = counters.get(&slot, 0).expect("reading the point counters");
        per_cpu
            .iter()
            .fold(PointCounters::default(), |sum, cpu| PointCounters {
                packets: sum.packets + cpu.packets,
                dns_packets: sum.dns_packets + cpu.dns_packets,
            })
    }

    /// Tells the programs that the interface test runs are seen on (loopback) carries raw IP,
    /// as a WireGuard or tun device does.
    fn register_loopback_as_raw_ip(&mut self) {
        let test_points = [Direction::Ingress, Direction::Egress].map(test_point);
        for known in &mut self.points {
            if test_points.contains(&known.point) {
                known.link_layer = LinkLayer::RawIp;
            }
        }
        self.sync_points();
    }

    /// What the programs take loopback's frames to start with.
    fn loopback_link(&self) -> LinkLayer {
        let ingress = test_point(Direction::Ingress);
        self.points
            .iter()
            .find(|known| known.point == ingress)
            .map_or(LinkLayer::Ethernet, |known| known.link_layer)
    }

    /// Takes every record streamed since the last call and checks that they are exactly
    /// `expected`, in order: each frame (up to the snap length) as run in its direction on
    /// loopback, streamed for its reason. Returns the records.
    fn assert_streamed(
        &mut self,
        expected: &[(&[u8], Direction, StreamReason)],
    ) -> Vec<PacketRecord> {
        let records = self.take_records();
        let reasons: Vec<Option<StreamReason>> = records
            .iter()
            .map(|record| StreamReason::from_u8(record.reason))
            .collect();
        assert_eq!(
            records.len(),
            expected.len(),
            "streamed records (with reasons {reasons:?})"
        );
        for (record, &(frame, direction, reason)) in records.iter().zip(expected) {
            let captured = frame.len().min(self.snap_len);
            let what = format!("the record of a {}-byte frame", frame.len());
            assert_eq!(StreamReason::from_u8(record.reason), Some(reason), "{what}");
            assert_eq!(
                Direction::from_u8(record.direction),
                Some(direction),
                "{what}"
            );
            assert_eq!(record.ifindex, LOOPBACK_IFINDEX, "{what}");
            assert_eq!(
                record.netns_cookie,
                this_namespace_cookie(),
                "{what}: loopback names its namespace"
            );
            assert_eq!(record.link_layer, self.loopback_link() as u8, "{what}");
            assert_eq!(record.wire_len as usize, frame.len(), "{what}");
            assert_eq!(usize::from(record.captured_len), captured, "{what}");
            assert_eq!(&record.bytes[..captured], &frame[..captured], "{what}");
        }
        records
    }

    /// Every record in the ring buffer, oldest first.
    fn take_records(&mut self) -> Vec<PacketRecord> {
        let mut records = Vec::new();
        while let Some(item) = self.records.next() {
            assert!(
                item.len() >= size_of::<PacketRecord>(),
                "a ring buffer item of {} bytes is no PacketRecord",
                item.len()
            );
            // SAFETY: the item holds a whole PacketRecord (checked above), which is plain
            // data; the ring gives no alignment guarantee, hence the unaligned read.
            records.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) });
        }
        records
    }
}

fn this_namespace_cookie() -> u64 {
    namespaces::current_cookie().expect("reading this namespace's cookie")
}

/// Where the test runs' frames are seen in `direction`.
fn test_point(direction: Direction) -> ObservationPoint {
    ObservationPoint::new(this_namespace_cookie(), LOOPBACK_IFINDEX, direction as u8)
}
