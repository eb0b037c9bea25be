//! ICMP port unreachables: counted when they refuse a DNS reply, skipped otherwise.

use std::net::{IpAddr, Ipv4Addr};

use super::common::*;
use dnsloop_shared::parse::{
    refused_query, LinkLayer, PacketClass, Skip, SlicePacket, Unreachable,
};

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
    let (client, server) = if ipv6 {
        (v6("fd00:10:244::2"), v6("fd00:10:244::3"))
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 244, 0, 3)),
        )
    };
    dnsloop_frames::icmp_frame(client, server, kind, code, quoted)
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

/// The DNS query 10.244.0.3:40000 -> 10.244.0.2:`dport` (or the IPv6 equivalent): what a
/// host where nothing listens on `dport` quotes back.
fn dns_query_to(ipv6: bool, dport: u16) -> Vec<u8> {
    let mut spec = FrameSpec {
        src: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 3)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2)),
        sport: 40000,
        dport,
        payload: dns_query(0x4321, "db.corp.example", QTYPE_A),
        ..FrameSpec::default()
    };
    if ipv6 {
        spec.src = v6("fd00:10:244::3");
        spec.dst = v6("fd00:10:244::2");
    }
    spec.ip_packet()
}

#[test]
fn a_port_unreachable_refusing_a_query_yields_the_query_and_who_refused_it() {
    for ipv6 in [false, true] {
        let (kind, code) = if ipv6 { (1, 4) } else { (3, 3) };
        let quoted = dns_query_to(ipv6, 53);
        let frame = icmp_frame(ipv6, kind, code, &quoted);
        // Not a refused reply: the kernel programs skip it, as before.
        assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotUdpOrTcp);
        let refused = refused_query(&SlicePacket(&frame), LinkLayer::Ethernet, &dns_ports())
            .unwrap_or_else(|| panic!("ipv6 {ipv6}: no refused query"));
        let refuser = if ipv6 {
            address_slot(v6("fd00:10:244::2"))
        } else {
            address_slot(IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2)))
        };
        assert_eq!(refused.refused_by.to_vec(), refuser, "ipv6 {ipv6}");
        assert_eq!(refused.why, Unreachable::Port);
        assert_eq!((refused.query.sport, refused.query.dport), (40000, 53));
        let message = &frame[refused.query.payload_offset..][..refused.query.payload_len];
        assert_eq!(message, &dns_query(0x4321, "db.corp.example", QTYPE_A)[..]);
    }
}

#[test]
fn only_a_port_unreachable_quoting_a_datagram_to_a_dns_port_is_a_refused_query() {
    let ports = dns_ports();
    let refused = |frame: &[u8]| refused_query(&SlicePacket(frame), LinkLayer::Ethernet, &ports);
    assert_eq!(
        refused(&icmp_frame(false, 3, 3, &dns_query_to(false, 8080))),
        None
    );
    assert_eq!(
        refused(&icmp_frame(false, 3, 0, &dns_query_to(false, 53))),
        None
    );
    assert_eq!(
        refused(&icmp_frame(false, 3, 3, &dns_reply(false, 53))),
        None
    );
    let query = FrameSpec {
        payload: dns_query(1, "a.test", QTYPE_A),
        ..FrameSpec::default()
    };
    assert_eq!(refused(&query.build()), None);
}

#[test]
fn a_host_unreachable_sends_back_a_query_no_neighbour_answered_for() {
    for (ipv6, kind, code) in [(false, 3, 1), (true, 1, 3)] {
        let frame = icmp_frame(ipv6, kind, code, &dns_query_to(ipv6, 53));
        let refused = refused_query(&SlicePacket(&frame), LinkLayer::Ethernet, &dns_ports())
            .unwrap_or_else(|| panic!("ipv6 {ipv6}: no refused query"));
        assert_eq!(refused.why, Unreachable::Host, "ipv6 {ipv6}");
    }
}
