//! The decoder on what spans packets or hides inside them: fragmented datagrams, TCP streams
//! cut anywhere, and frames carried in VXLAN or Geneve.
use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_frames::{
    dns_query, dns_response, icmp_frame, link_header, tcp_stream, FrameSpec, QTYPE_A,
};
use dnsloop_shared::{
    parse::{DnsPorts, LinkLayer, Transport},
    point::Direction,
};
use hickory_proto::{op::Message, serialize::binary::BinDecodable};

use super::*;
use crate::{
    observation::Point,
    points::{InterfaceRef, Seen},
    source::RawPacket,
};

fn at(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}

fn seen() -> Seen {
    Seen {
        interface: InterfaceRef {
            netns_cookie: 0,
            ifindex: 2,
        },
        direction: Direction::Ingress,
        via_gateway: false,
    }
}

fn point() -> Arc<Point> {
    Arc::new(Point {
        ifname: Arc::from("eth0"),
        direction: Direction::Ingress,
        leaves: None,
        enters: None,
    })
}

fn packet(millis: u64, link: LinkLayer, bytes: Vec<u8>) -> RawPacket {
    RawPacket {
        ts: at(millis),
        seen: seen(),
        link_layer: link,
        bytes: bytes.into(),
        matched_query: None,
        priors: Vec::new(),
        recorder_only: false,
    }
}

fn decoder() -> Decoder {
    Decoder::new(DnsPorts::new(&[53]), Coverage::EveryPacket)
}

/// Decodes `packets` in order, then ends the input; returns every observation and each
/// packet's outcome.
fn decode_all(
    decoder: &mut Decoder,
    packets: &[RawPacket],
) -> (Vec<Observation>, Vec<Result<(), NotDecoded>>) {
    let point = point();
    let mut out = Vec::new();
    let outcomes = packets
        .iter()
        .map(|packet| decoder.decode(packet, |_| Some(&point), &mut out))
        .collect();
    decoder.finish(&mut out);
    (out, outcomes)
}

/// A query padded past any MTU: the header and question, then `padding` bytes the question
/// does not claim (the shared parser reads the header and question; nothing else is needed).
fn large_query(id: u16, padding: usize) -> Vec<u8> {
    let mut message = dns_query(id, "big.example.test", QTYPE_A);
    message.resize(message.len() + padding, 0xaa);
    message
}

/// `ip`, an IPv4 packet with a 20-byte header, as Ethernet frames of fragments holding
/// `chunk` bytes of its payload each (a multiple of 8).
fn ipv4_fragments(ip: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let (header, payload) = ip.split_at(20);
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(index, data)| {
            let offset = index * chunk;
            let more = offset + data.len() < payload.len();
            let mut fragment = header.to_vec();
            let total = u16::try_from(20 + data.len()).unwrap();
            fragment[2..4].copy_from_slice(&total.to_be_bytes());
            let field = u16::try_from(offset / 8).unwrap() | if more { 0x2000 } else { 0 };
            fragment[6..8].copy_from_slice(&field.to_be_bytes());
            fragment.extend_from_slice(data);
            let mut frame = link_header(LinkLayer::Ethernet, 0, 0x0800);
            frame.extend_from_slice(&fragment);
            frame
        })
        .collect()
}

/// `ip`, an IPv6 packet with no extension header, as Ethernet frames of fragments.
fn ipv6_fragments(ip: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let (header, payload) = ip.split_at(40);
    let protocol = header[6];
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(index, data)| {
            let offset = index * chunk;
            let more = offset + data.len() < payload.len();
            let mut fragment = header.to_vec();
            fragment[4..6].copy_from_slice(&u16::try_from(8 + data.len()).unwrap().to_be_bytes());
            fragment[6] = 44;
            let field = u16::try_from(offset).unwrap() | u16::from(more);
            fragment.extend_from_slice(&[protocol, 0]);
            fragment.extend_from_slice(&field.to_be_bytes());
            fragment.extend_from_slice(&0x0bad_cafe_u32.to_be_bytes());
            fragment.extend_from_slice(data);
            let mut frame = link_header(LinkLayer::Ethernet, 0, 0x86dd);
            frame.extend_from_slice(&fragment);
            frame
        })
        .collect()
}

#[test]
fn fragmented_datagrams_are_read_whole_in_any_order() {
    for ipv6 in [false, true] {
        let mut spec = FrameSpec {
            payload: large_query(0x4242, 3000),
            ..FrameSpec::default()
        };
        if ipv6 {
            spec = spec.ipv6();
        }
        let ip = spec.ip_packet();
        let mut fragments = if ipv6 {
            ipv6_fragments(&ip, 1448)
        } else {
            ipv4_fragments(&ip, 1480)
        };
        assert_eq!(fragments.len(), 3);
        // The last fragment first, as a reordering path may deliver them.
        fragments.rotate_right(1);
        let packets: Vec<RawPacket> = fragments
            .into_iter()
            .enumerate()
            .map(|(index, frame)| packet(index as u64, LinkLayer::Ethernet, frame))
            .collect();
        let mut decoder = decoder();
        let (observations, outcomes) = decode_all(&mut decoder, &packets);
        assert_eq!(observations.len(), 1, "ipv6: {ipv6}");
        let query = &observations[0];
        assert_eq!(query.id, 0x4242);
        assert_eq!(query.size, large_query(0x4242, 3000).len());
        assert_eq!(query.ts, at(2), "read at its last fragment");
        assert_eq!(
            outcomes,
            vec![
                Err(NotDecoded::InReassembly),
                Err(NotDecoded::InReassembly),
                Ok(())
            ]
        );
        let counts = decoder.reassembly().ip;
        assert_eq!((counts.fragments, counts.reassembled), (3, 1));
        assert_eq!(counts.incomplete, 0);
    }
}

#[test]
fn a_first_fragment_whose_rest_never_comes_is_named_and_read_alone() {
    let ip = FrameSpec {
        payload: large_query(0x0707, 2000),
        ..FrameSpec::default()
    }
    .ip_packet();
    let first = ipv4_fragments(&ip, 1480).remove(0);
    let mut decoder = decoder();
    let point = point();
    let mut out = Vec::new();
    let outcome = decoder.decode(
        &packet(0, LinkLayer::Ethernet, first),
        |_| Some(&point),
        &mut out,
    );
    assert_eq!(outcome, Err(NotDecoded::InReassembly));
    decoder.expire(at(500), &mut out);
    assert!(out.is_empty(), "the rest may still come");
    decoder.expire(at(1000) + FRAGMENT_WAIT, &mut out);
    assert_eq!(out.len(), 1, "the header and question it holds were sent");
    assert_eq!((out[0].id, out[0].ts), (0x0707, at(0)));
    let counts = decoder.reassembly().ip;
    assert_eq!(counts.incomplete, 1);
    assert_eq!(
        counts.incomplete_named[0].to_string(),
        format!("10.0.0.1 > 10.96.0.10 id 0xabcd: 1480 bytes (the last fragment never came)")
    );
}

#[test]
fn dns_inside_vxlan_and_geneve_is_read() {
    let inner = FrameSpec::default().build();
    let vxlan = [0x08, 0, 0, 0, 0, 0, 42, 0];
    let geneve = [0x00, 0, 0x65, 0x58, 0, 0, 42, 0];
    for (port, header) in [(4789, vxlan), (8472, vxlan), (6081, geneve)] {
        let mut payload = header.to_vec();
        payload.extend_from_slice(&inner);
        let outer = FrameSpec {
            src: "192.168.0.2".parse().unwrap(),
            dst: "192.168.0.3".parse().unwrap(),
            sport: 51000,
            dport: port,
            payload,
            ..FrameSpec::default()
        }
        .build();
        let mut decoder = decoder();
        let (observations, _) = decode_all(&mut decoder, &[packet(0, LinkLayer::Ethernet, outer)]);
        assert_eq!(observations.len(), 1, "port {port}");
        assert_eq!(observations[0].src.to_string(), "10.0.0.1:40000");
        assert_eq!(observations[0].id, 0x1234);
        assert_eq!(decoder.reassembly().encapsulated, 1);
    }
}

#[test]
fn a_tcp_length_in_a_segment_of_its_own_is_joined_to_its_message() {
    let query = dns_query(0x5151, "kubernetes.default.svc.cluster.local", QTYPE_A);
    let stream = tcp_stream(&[&query]);
    let segment = tcp_segment;
    let packets = [
        packet(0, LinkLayer::Ethernet, segment(1000, &stream[..2])),
        packet(1, LinkLayer::Ethernet, segment(1002, &stream[2..])),
    ];
    let (observations, outcomes) = decode_all(&mut decoder(), &packets);
    assert_eq!(outcomes[0], Err(NotDecoded::InReassembly));
    assert_eq!(observations.len(), 1, "{observations:#?}");
    assert_eq!(observations[0].id, 0x5151);
    let labels: Vec<&[u8]> = observations[0]
        .question
        .as_ref()
        .map(|question| question.name.labels().collect())
        .unwrap_or_default();
    assert_eq!(
        labels,
        [&b"kubernetes"[..], b"default", b"svc", b"cluster", b"local"]
    );
}

/// An Ethernet frame of the TCP segment holding `data` at sequence number `seq`.
fn tcp_segment(seq: u32, data: &[u8]) -> Vec<u8> {
    let mut frame = FrameSpec {
        transport: Transport::Tcp,
        payload: data.to_vec(),
        ..FrameSpec::default()
    }
    .build();
    // The sequence number, after the Ethernet (14) and IPv4 (20) headers and the ports.
    frame[38..42].copy_from_slice(&seq.to_be_bytes());
    frame
}

#[test]
fn recorded_segments_complete_messages_begun_for_analysis_and_give_none_of_their_own() {
    // trace --record: the kernel streams for analysis the segment whose message it judged
    // (here, the length alone), and the rest only to be recorded.
    let query = dns_query(0x5252, "api.default.svc.cluster.local", QTYPE_A);
    let stream = tcp_stream(&[&query, &query]);
    let half = query.len() + 2;
    let recorded = |mut packet: RawPacket| {
        packet.recorder_only = true;
        packet
    };
    let packets = [
        packet(0, LinkLayer::Ethernet, tcp_segment(1000, &stream[..2])),
        recorded(packet(
            1,
            LinkLayer::Ethernet,
            tcp_segment(1002, &stream[2..half]),
        )),
        recorded(packet(
            2,
            LinkLayer::Ethernet,
            tcp_segment(1000 + half as u32, &stream[half..]),
        )),
        recorded(packet(3, LinkLayer::Ethernet, FrameSpec::default().build())),
    ];
    let (observations, _) = decode_all(&mut decoder(), &packets);
    assert_eq!(observations.len(), 1, "{observations:#?}");
    assert_eq!((observations[0].id, observations[0].ts), (0x5252, at(1)));
    assert!(
        completes_for_analysis(&packets[2]),
        "a recorded TCP segment may complete one"
    );
    assert!(
        !completes_for_analysis(&packets[3]),
        "a recorded datagram never does"
    );
}

/// A 3,000-byte reply from the cluster DNS to the client, as an IP packet.
fn large_reply(query: FrameSpec) -> Vec<u8> {
    let mut reply = dns_response(0x0808, "big.example.test", QTYPE_A);
    reply.resize(3_000, 0xaa);
    FrameSpec {
        src: query.dst,
        dst: query.src,
        sport: 53,
        dport: 40000,
        payload: reply,
        ..query
    }
    .ip_packet()
}

#[test]
fn a_reply_whose_reassembly_a_host_gave_up_is_its_drop_there() {
    let point = point();
    let decoder = decoder();
    for query in [FrameSpec::default(), FrameSpec::default().ipv6()] {
        let ip = large_reply(query.clone());
        // What Linux quotes of the first fragment: 548 bytes in ICMP, 1232 in ICMPv6 (as much
        // as fits 576 and 1280 bytes in all), its headers and start.
        let (first, fragment_len, time_exceeded) = if query.src.is_ipv4() {
            (
                ipv4_fragments(&ip, 1480)[0][14..14 + 548].to_vec(),
                1_500,
                11,
            )
        } else {
            (
                ipv6_fragments(&ip, 1448)[0][14..14 + 1232].to_vec(),
                1_496,
                3,
            )
        };
        let gave_up = icmp_frame(query.src, query.dst, time_exceeded, 1, &first);
        let dropped = decoder
            .decode_refusal(&packet(0, LinkLayer::Ethernet, gave_up), &point)
            .expect("a reply given up");
        assert_eq!(dropped.cause.reason.as_ref(), REASSEMBLY_TIMEOUT);
        assert_eq!(
            dropped.cause.place.namespace,
            Some(Namespace::new(&format!("host {}", query.src))),
            "the ICMP's sender, where the capture does not place it"
        );
        assert!(dropped.is_response);
        assert_eq!(
            (dropped.src.port(), dropped.dst.port(), dropped.id),
            (53, 40000, 0x0808)
        );
        assert_eq!(
            dropped.fragmented,
            Some(FragmentSizes {
                message: 3_000,
                first_fragment: fragment_len
            })
        );
        // Time exceeded in transit (a hop limit), and the whole reply quoted, are no such thing.
        let in_transit = icmp_frame(query.src, query.dst, time_exceeded, 0, &first);
        let whole = icmp_frame(query.src, query.dst, time_exceeded, 1, &ip[..548]);
        for other in [in_transit, whole] {
            assert_eq!(
                decoder.decode_refusal(&packet(0, LinkLayer::Ethernet, other), &point),
                None
            );
        }
    }
}

#[test]
fn a_querys_edns_size_is_read_from_its_opt_record() {
    let mut with_opt = dns_query(0x0909, "big.example.test", QTYPE_A);
    with_opt[10..12].copy_from_slice(&1u16.to_be_bytes());
    // OPT: the root name, type 41, the UDP size as its class, TTL, no data.
    with_opt.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0]);
    let mut sizes = Vec::new();
    for payload in [with_opt, dns_query(0x0a0a, "big.example.test", QTYPE_A)] {
        let frame = FrameSpec {
            payload,
            ..FrameSpec::default()
        }
        .build();
        let (out, _) = decode_all(&mut decoder(), &[packet(0, LinkLayer::Ethernet, frame)]);
        sizes.push(out[0].edns_udp_size);
    }
    assert_eq!(sizes, [Some(4096), None]);
}

/// A reply to `big.example.test` with header rcode 7, an A record (its name a pointer to the
/// question's) and an OPT record whose upper rcode bits are 1: BADCOOKIE, 23 (RFC 7873).
fn reply_with_extended_rcode() -> Vec<u8> {
    let mut reply = dns_response(0x0b0b, "big.example.test", QTYPE_A);
    reply[3] |= 7;
    reply[6..8].copy_from_slice(&1u16.to_be_bytes());
    reply[10..12].copy_from_slice(&1u16.to_be_bytes());
    reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
    reply.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 1, 0, 0, 0, 0, 0]);
    reply
}

#[test]
fn a_replys_rcode_takes_its_opt_records_upper_bits_past_its_answers() {
    let reply = reply_with_extended_rcode();
    let reference = Message::from_bytes(&reply).expect("well formed");
    assert_eq!(
        u16::from(reference.response_code),
        23,
        "hickory reads it so"
    );
    let cut = reply[..reply.len() - 5].to_vec();
    let mut rcodes = Vec::new();
    for payload in [reply, cut] {
        let frame = FrameSpec {
            payload,
            sport: 53,
            dport: 40000,
            ..FrameSpec::default()
        }
        .build();
        let (out, _) = decode_all(&mut decoder(), &[packet(0, LinkLayer::Ethernet, frame)]);
        rcodes.push(out[0].rcode);
    }
    assert_eq!(rcodes, [23, 7], "a cut OPT record leaves the header's bits");
}
