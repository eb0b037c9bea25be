//! Feeds arbitrary bytes through the whole parser the way the kernel programs use it, as a
//! frame of every link layer, and checks that everything it reports lies inside the input; so
//! too for the query an ICMP error quotes, as userspace reads it from captures.
//! The input is also parsed as a bare DNS message, which reaches deep into `parse_dns` faster.
#![no_main]

use dnsloop_shared::parse::{
    classify, name_hash, parse_dns, refused_query, tcp_framing, udp_message, DnsMessageRef,
    DnsPorts, LinkLayer, PacketClass, Segment, SlicePacket, Transport, DNS_BUF_LEN,
    MAX_TCP_MESSAGES,
};
use libfuzzer_sys::fuzz_target;

const LINKS: [LinkLayer; 4] = [
    LinkLayer::Ethernet,
    LinkLayer::RawIp,
    LinkLayer::LinuxSll,
    LinkLayer::LinuxSll2,
];

fuzz_target!(|data: &[u8]| {
    let ports = DnsPorts::new(&[53, 5353]);
    for link in LINKS {
        if let PacketClass::Dns(segment) = classify(&SlicePacket(data), link, &ports) {
            check_segment(data, &segment);
        }
        if let Some(refused) = refused_query(&SlicePacket(data), link, &ports) {
            check_segment(data, &refused.query);
        }
    }
    check_dns(&data[..data.len().min(DNS_BUF_LEN)]);
});

fn check_segment(data: &[u8], segment: &Segment) {
    let payload_end = segment.payload_offset + segment.payload_len;
    assert!(segment.l3_offset < segment.payload_offset);
    assert!(payload_end <= data.len());
    assert!(segment.payload_len <= segment.declared_payload_len);
    match segment.transport {
        Transport::Udp => check_message(data, segment, &udp_message(segment)),
        Transport::Tcp => {
            let framing = tcp_framing(&SlicePacket(data), segment);
            assert!(framing.count <= MAX_TCP_MESSAGES);
            assert!(!framing.more || framing.count == MAX_TCP_MESSAGES);
            let mut previous_end = segment.payload_offset;
            for msg in framing.messages() {
                assert_eq!(msg.offset, previous_end + 2, "messages follow each other");
                previous_end = msg.offset + msg.len;
                check_message(data, segment, msg);
            }
        }
    }
}

fn check_message(data: &[u8], segment: &Segment, msg: &DnsMessageRef) {
    let payload_end = segment.payload_offset + segment.payload_len;
    let len = msg.load_len(segment);
    assert!(msg.offset + len <= payload_end);
    assert_eq!(msg.complete, msg.offset + msg.len <= payload_end);
    check_dns(&data[msg.offset..msg.offset + len]);
}

/// Parses `msg` from a DNS buffer twice, with different stale bytes after it: the result must
/// not depend on them, and a parsed question must lie inside the message.
fn check_dns(msg: &[u8]) {
    let mut zeroed = [0u8; DNS_BUF_LEN];
    zeroed[..msg.len()].copy_from_slice(msg);
    let mut stale = [0x30u8; DNS_BUF_LEN];
    stale[..msg.len()].copy_from_slice(msg);
    let parsed = parse_dns(&zeroed, msg.len());
    assert_eq!(
        parsed,
        parse_dns(&stale, msg.len()),
        "stale buffer bytes were read"
    );
    if let Ok(summary) = parsed {
        assert_eq!(summary.question.is_some(), summary.header.qdcount != 0);
        if let Some(question) = summary.question {
            let name_end = 12 + usize::from(question.name_len);
            assert!(name_end + 4 <= msg.len());
            assert!(question.labels <= 127);
            assert_eq!(question.name_hash, name_hash(&msg[12..name_end]));
        }
    }
}
