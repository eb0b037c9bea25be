//! What the parser walks besides a UDP datagram over IPv4 and Ethernet: TCP segments, IPv6
//! extension headers, VLAN tags, and interfaces without Ethernet.
use dnsloop_frames::*;
use dnsloop_shared::{
    counter::Counter,
    point::Direction,
    record::{StreamReason, PACKET_SNAP_MAX},
};

use super::kit::*;

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
