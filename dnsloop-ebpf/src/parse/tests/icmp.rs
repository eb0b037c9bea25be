//! ICMP port unreachables: counted when they refuse a DNS reply, skipped otherwise.

use std::net::{IpAddr, Ipv4Addr};

use super::common::*;
use crate::parse::{LinkLayer, PacketClass, Skip};

/// The DNS reply 10.244.0.3:53 -> 10.244.0.2:40000 (or the IPv6 equivalent) as an IP packet.
fn dns_reply(ipv6: bool, sport: u16) -> Vec<u8> {
    let mut spec = FrameSpec {
        src: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 3)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2)),
        sport,
        dport: 40000,
        payload: dns_response(0x1234, "kubernetes.default.svc.cluster.local", QTYPE_A),
        ..FrameSpec::default()
    };
    if ipv6 {
        spec.src = v6("fd00:10:244::3");
        spec.dst = v6("fd00:10:244::2");
    }
    spec.ip_packet()
}

/// An Ethernet frame from the client back to the server carrying ICMP `kind`/`code` that
/// quotes `quoted`.
fn icmp_frame(ipv6: bool, kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    let mut frame = link_header(LinkLayer::Ethernet, 0, if ipv6 { 0x86dd } else { 0x0800 });
    if ipv6 {
        let mut header = vec![0x60, 0, 0, 0];
        header.extend_from_slice(&u16::try_from(icmp.len()).unwrap().to_be_bytes());
        header.extend_from_slice(&[58, 64]);
        header.extend_from_slice(&address_slot(v6("fd00:10:244::2")));
        header.extend_from_slice(&address_slot(v6("fd00:10:244::3")));
        frame.extend_from_slice(&header);
    } else {
        let total = u16::try_from(20 + icmp.len()).unwrap();
        frame.extend_from_slice(&[0x45, 0]);
        frame.extend_from_slice(&total.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 0, 64, 1, 0, 0, 10, 244, 0, 2, 10, 244, 0, 3]);
    }
    frame.extend_from_slice(&icmp);
    frame
}

#[test]
fn a_port_unreachable_refusing_a_dns_reply_is_recognised() {
    for ipv6 in [false, true] {
        let (kind, code) = if ipv6 { (1, 4) } else { (3, 3) };
        let frame = icmp_frame(ipv6, kind, code, &dns_reply(ipv6, 53));
        assert_eq!(
            classify_frame(&frame, LinkLayer::Ethernet),
            PacketClass::DnsPortUnreachable,
            "ipv6: {ipv6}"
        );
    }
}

#[test]
fn only_a_quoted_reply_from_a_dns_port_counts() {
    // The client itself sent from 53? No: the quoted datagram is the refused reply, whose
    // source is the server's port.
    let frame = icmp_frame(false, 3, 3, &dns_reply(false, 8080));
    assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotUdpOrTcp);
}

#[test]
fn other_icmp_messages_are_skipped() {
    for (kind, code) in [(8, 0), (3, 1), (11, 0)] {
        let frame = icmp_frame(false, kind, code, &dns_reply(false, 53));
        assert_eq!(
            skipped(&frame, LinkLayer::Ethernet),
            Skip::NotUdpOrTcp,
            "{kind}/{code}"
        );
    }
    // ICMPv4's port unreachable numbers mean something else in ICMPv6.
    let frame = icmp_frame(true, 3, 3, &dns_reply(true, 53));
    assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotUdpOrTcp);
}

#[test]
fn a_quote_cut_before_the_source_port_is_skipped_not_malformed() {
    let full = icmp_frame(false, 3, 3, &dns_reply(false, 53));
    let quote_start = full.len() - dns_reply(false, 53).len();
    // The quoted IPv4 header and the UDP source port: all it takes to know a DNS reply.
    let enough = quote_start + 20 + 2;
    for cut in quote_start..enough {
        assert_eq!(
            skipped(&full[..cut], LinkLayer::Ethernet),
            Skip::NotUdpOrTcp,
            "cut at {cut}"
        );
    }
    assert_eq!(
        classify_frame(&full[..enough], LinkLayer::Ethernet),
        PacketClass::DnsPortUnreachable
    );
}
