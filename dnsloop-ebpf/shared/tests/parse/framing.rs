//! Locating DNS messages: UDP, and length-prefixed TCP streams.

use super::common::*;
use dnsloop_shared::parse::{
    tcp_framing, udp_message, DnsMessageRef, LinkLayer, Malformed, SlicePacket, TcpFraming,
    Transport, DNS_BUF_LEN, MAX_TCP_MESSAGES,
};

fn tcp_spec(payload: Vec<u8>) -> FrameSpec {
    FrameSpec {
        transport: Transport::Tcp,
        payload,
        ..FrameSpec::default()
    }
}

fn framing_of(frame: &[u8]) -> TcpFraming {
    let segment = segment_of(frame, LinkLayer::Ethernet);
    tcp_framing(&SlicePacket(frame), &segment)
}

#[test]
fn udp_carries_one_complete_message() {
    let spec = FrameSpec::default();
    let frame = spec.build();
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    let msg = udp_message(&segment);
    assert_eq!(
        msg,
        DnsMessageRef {
            offset: spec.payload_offset(),
            len: spec.payload.len(),
            complete: true
        }
    );
    assert_eq!(msg.load_len(&segment), spec.payload.len());
}

#[test]
fn udp_message_of_a_cut_datagram_is_incomplete() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    frame.truncate(frame.len() - 5);
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    let msg = udp_message(&segment);
    assert!(!msg.complete);
    assert_eq!(msg.len, spec.payload.len());
    assert_eq!(msg.load_len(&segment), spec.payload.len() - 5);
}

#[test]
fn load_len_is_capped_at_the_dns_buffer() {
    let spec = FrameSpec {
        payload: vec![0; 1400],
        ..FrameSpec::default()
    };
    let frame = spec.build();
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    assert_eq!(udp_message(&segment).load_len(&segment), DNS_BUF_LEN);
}

#[test]
fn tcp_segment_with_two_messages() {
    let first = dns_query(1, "a.example", QTYPE_A);
    let second = dns_query(2, "bb.example", QTYPE_A);
    let spec = tcp_spec(tcp_stream(&[&first, &second]));
    let frame = spec.build();
    let framing = framing_of(&frame);
    let start = spec.payload_offset();
    assert_eq!(framing.count, 2);
    assert!(!framing.split && !framing.more);
    assert_eq!(
        framing.messages().copied().collect::<Vec<_>>(),
        vec![
            DnsMessageRef {
                offset: start + 2,
                len: first.len(),
                complete: true
            },
            DnsMessageRef {
                offset: start + 4 + first.len(),
                len: second.len(),
                complete: true
            },
        ]
    );
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    let ids: Vec<u16> = parse_messages(&frame, &segment)
        .into_iter()
        .map(|(_, parsed)| parsed.unwrap().header.id)
        .collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn message_split_across_segments_is_flagged_not_guessed() {
    let first = dns_query(1, "a.example", QTYPE_A);
    let second = dns_query(2, "bb.example", QTYPE_A);
    let mut stream = tcp_stream(&[&first, &second]);
    stream.truncate(stream.len() - 7); // the rest of `second` comes in the next segment
    let frame = tcp_spec(stream).build();
    let framing = framing_of(&frame);
    assert_eq!(framing.count, 2);
    assert!(framing.split);
    let last = framing.messages[1];
    assert_eq!((last.len, last.complete), (second.len(), false));
}

#[test]
fn length_prefix_split_across_segments() {
    let first = dns_query(1, "a.example", QTYPE_A);
    let mut stream = tcp_stream(&[&first]);
    stream.push(0); // the first byte of the next message's length
    let framing = framing_of(&tcp_spec(stream).build());
    assert_eq!(framing.count, 1);
    assert!(framing.split);
}

#[test]
fn a_capture_cut_inside_the_segment_is_incomplete_but_not_split() {
    let first = dns_query(1, "a.example", QTYPE_A);
    let second = dns_query(2, "bb.example", QTYPE_A);
    let mut frame = tcp_spec(tcp_stream(&[&first, &second])).build();
    frame.truncate(frame.len() - 3);
    let framing = framing_of(&frame);
    assert_eq!(framing.count, 2);
    assert!(!framing.messages[1].complete);
    assert!(!framing.split);
}

#[test]
fn more_messages_than_the_framing_holds() {
    let query = dns_query(7, "x.example", QTYPE_A);
    let messages = vec![query.as_slice(); MAX_TCP_MESSAGES + 1];
    let framing = framing_of(&tcp_spec(tcp_stream(&messages)).build());
    assert_eq!(framing.count, MAX_TCP_MESSAGES);
    assert!(framing.more);
    assert!(framing.messages().all(|msg| msg.complete));

    let exactly = vec![query.as_slice(); MAX_TCP_MESSAGES];
    let framing = framing_of(&tcp_spec(tcp_stream(&exactly)).build());
    assert_eq!(framing.count, MAX_TCP_MESSAGES);
    assert!(!framing.more);
}

#[test]
fn empty_tcp_payload_has_no_messages() {
    let framing = framing_of(&tcp_spec(Vec::new()).build());
    assert_eq!(
        (framing.count, framing.split, framing.more),
        (0, false, false)
    );
}

#[test]
fn zero_length_message_is_framed_and_then_fails_to_parse() {
    let frame = tcp_spec(vec![0, 0]).build();
    let framing = framing_of(&frame);
    assert_eq!(framing.count, 1);
    assert_eq!(
        (framing.messages[0].len, framing.messages[0].complete),
        (0, true)
    );
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    let parsed: Vec<_> = parse_messages(&frame, &segment)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    assert_eq!(parsed, vec![Err(Malformed::DnsTruncatedHeader)]);
}

#[test]
fn a_segment_that_does_not_match_the_packet_never_reads_outside_it() {
    let spec = tcp_spec(tcp_stream(&[&dns_query(1, "a.example", QTYPE_A)]));
    let frame = spec.build();
    let mut segment = segment_of(&frame, LinkLayer::Ethernet);
    segment.payload_len += 100;
    segment.declared_payload_len += 100;
    let cut = &frame[..segment.payload_offset + 1]; // half a length prefix
    let framing = tcp_framing(&SlicePacket(cut), &segment);
    assert_eq!(framing.count, 0);
}
