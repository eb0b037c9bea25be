//! What the programs count: packets and DNS packets, per point and in all, malformed frames by
//! reason, fragments; and packets at a point the programs were not told of.
use aya::{TestRun as _, TestRunOptions};
use dnsloop_frames::*;
use dnsloop_shared::{
    counter::Counter,
    parse::{LinkLayer, Malformed},
    point::{Direction, ObservationPoint, PointCounters, PointSlot, POINT_SLOTS},
    record::{StreamReason, PACKET_SNAP_MAX},
};
use dnsloop_tests::or_fail::OrFail as _;

use crate::kernel::{
    point_table::ethernet_point,
    programs::{self, Settings},
};

use super::kit::*;

/// The only verdict the XDP program gives: on to the stack.
const XDP_PASS: u32 = 2;

const ETHERTYPE_ARP: u16 = 0x0806;

const ETHERTYPE_VLAN: u16 = 0x8100;

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
        .map_err(anyhow::Error::from)
        .or_fail("BPF_PROG_TEST_RUN");
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
