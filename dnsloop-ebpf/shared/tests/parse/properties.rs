//! Property tests: arbitrary input never panics, valid frames round-trip, and the name hash is
//! case-insensitive yet tells names apart.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::common::*;
use dnsloop_shared::parse::{
    classify, encapsulated_frame, ip_fragment, name_hash, parse_dns, parse_dns_with, tcp_framing,
    tcp_position, ByteWalk, DnsPorts, LinkLayer, NameWalk, PacketClass, Probe, Segment,
    SlicePacket, Transport, DNS_BUF_LEN,
};

fn link_layer() -> impl Strategy<Value = LinkLayer> {
    prop::sample::select(ALL_LINKS.to_vec())
}

/// Labels of letters, digits and hyphens whose wire form fits in 255 bytes: either a few long
/// labels or many short ones.
fn name_labels() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        prop::collection::vec("[a-zA-Z0-9-]{1,63}", 0..=3),
        prop::collection::vec("[a-zA-Z0-9-]{1,3}", 0..=60),
    ]
}

/// Names that are, or nearly are, loop-detection probes, and ordinary ones.
fn probe_like_labels() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        name_labels(),
        (
            "[0-9]{1,21}",
            "[0-9x]{1,21}",
            prop::collection::vec("[a-z]{1,5}", 0..3)
        )
            .prop_map(|(first, second, zone)| [vec![first, second], zone].concat()),
        ("[0-9a-gA-G]{7,9}", "[tT][eE][sS][tTx]{1,2}").prop_map(|(hex, test)| vec![hex, test]),
    ]
}

/// Runs the whole pipeline the way the BPF side does; the only point is not to panic, and to
/// keep every offset inside the packet.
fn run_pipeline(frame: &[u8], link: LinkLayer, ports: &DnsPorts) {
    // What only userspace reads: fragments and tunnels.
    if let Some(fragment) = ip_fragment(&SlicePacket(frame), link) {
        assert!(fragment.data_len <= fragment.declared_len);
        assert!(fragment.data_len == 0 || fragment.data_offset + fragment.data_len <= frame.len());
    }
    encapsulated_frame(&SlicePacket(frame), link);
    if let PacketClass::Dns(segment) = classify(&SlicePacket(frame), link, ports) {
        assert!(segment.payload_offset + segment.payload_len <= frame.len());
        assert!(segment.payload_len <= segment.declared_payload_len);
        assert!(segment.l4_offset < segment.payload_offset);
        assert_eq!(
            tcp_position(&SlicePacket(frame), &segment).is_some(),
            segment.transport == Transport::Tcp
        );
        for (msg, _) in parse_messages(frame, &segment) {
            assert!(msg.offset >= segment.payload_offset);
            assert!(msg.offset + msg.load_len(&segment) <= frame.len());
        }
    }
}

fn ipv6_extension() -> impl Strategy<Value = ExtensionHeader> {
    prop_oneof![
        Just(ExtensionHeader::HopByHop),
        Just(ExtensionHeader::Routing),
        Just(ExtensionHeader::DestinationOptions),
        Just(ExtensionHeader::Authentication),
        any::<bool>().prop_map(|more| ExtensionHeader::Fragment { offset: 0, more }),
    ]
}

/// Everything a round-trip frame is built from.
#[derive(Clone, Debug)]
struct FrameInputs {
    spec: FrameSpec,
    id: u16,
    labels: Vec<String>,
    qtype: u16,
    dns_port: u16,
}

fn frame_inputs() -> impl Strategy<Value = FrameInputs> {
    let addresses = prop_oneof![
        any::<([u8; 4], [u8; 4])>()
            .prop_map(|(s, d)| (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d)))),
        any::<([u8; 16], [u8; 16])>()
            .prop_map(|(s, d)| (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))),
    ];
    (
        (link_layer(), 0..=2usize, addresses, any::<bool>()),
        (1..=u16::MAX, 1..=u16::MAX, any::<bool>()),
        (
            0..=10usize,
            0..=10usize,
            prop::collection::vec(ipv6_extension(), 0..=6),
        ),
        (any::<u16>(), name_labels(), any::<u16>()),
    )
        .prop_map(
            |(
                (link, vlan_tags, (src, dst), tcp),
                (dns_port, other_port, query),
                (ipv4_option_words, tcp_option_words, ipv6_extensions),
                (id, labels, qtype),
            )| {
                let (sport, dport) = if query {
                    (other_port, dns_port)
                } else {
                    (dns_port, other_port)
                };
                let vlan_tags = if link == LinkLayer::RawIp {
                    0
                } else {
                    vlan_tags
                };
                let payload = dns_query(id, &labels.join("."), qtype);
                let mut spec = FrameSpec {
                    link,
                    vlan_tags,
                    src,
                    dst,
                    sport,
                    dport,
                    ipv4_options: vec![1; ipv4_option_words * 4],
                    ipv6_extensions,
                    tcp_options: vec![1; tcp_option_words * 4],
                    payload,
                    ..FrameSpec::default()
                };
                if tcp {
                    spec = spec.tcp();
                }
                FrameInputs {
                    spec,
                    id,
                    labels,
                    qtype,
                    dns_port,
                }
            },
        )
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        frame in prop::collection::vec(any::<u8>(), 0..600),
        ports in prop::collection::vec(any::<u16>(), 0..=8),
    ) {
        let ports = DnsPorts::from_list(&ports).expect("at most 8 ports");
        for link in ALL_LINKS {
            run_pipeline(&frame, link, &ports);
        }
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        inputs in frame_inputs(),
        mutations in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut frame = inputs.spec.build();
        for (at, byte) in mutations {
            let index = at.index(frame.len());
            frame[index] = byte;
        }
        frame.truncate(cut.index(frame.len() + 1));
        run_pipeline(&frame, inputs.spec.link, &DnsPorts::new(&[inputs.dns_port]));
    }

    #[test]
    fn arbitrary_dns_buffers_never_panic(
        bytes in prop::collection::vec(any::<u8>(), DNS_BUF_LEN),
        len in 0..=DNS_BUF_LEN + 64,
    ) {
        let buf: [u8; DNS_BUF_LEN] = bytes.try_into().unwrap();
        if let Ok(summary) = parse_dns(&buf, len) {
            if let Some(question) = summary.question {
                let name_end = 12 + usize::from(question.name_len);
                prop_assert!(name_end + 4 <= len);
                prop_assert_eq!(question.name_hash, name_hash(&buf[12..name_end]));
            }
        }
    }

    /// The programs for kernels without `bpf_loop` walk names byte by byte: the outcome, hash,
    /// length and labels are those of the walk label by label, on valid names as on any bytes.
    #[test]
    fn the_byte_walk_finds_what_the_label_walk_finds(
        labels in prop_oneof![
            probe_like_labels(),
            // Past 255 wire bytes, cut or whole.
            prop::collection::vec("[a-z]{40,63}", 4..=6),
        ],
        noise in prop::collection::vec(any::<u8>(), DNS_BUF_LEN),
        noisy in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf: [u8; DNS_BUF_LEN] = noise.try_into().unwrap();
        let len = if noisy {
            cut.index(DNS_BUF_LEN + 1)
        } else {
            let msg = dns_query(1, &labels.join("."), QTYPE_A);
            let msg = &msg[..msg.len().min(DNS_BUF_LEN)];
            buf[..msg.len()].copy_from_slice(msg);
            cut.index(msg.len() + 1)
        };
        let by_bytes = parse_dns_with(&buf, len, &mut NameWalk::default(), ByteWalk);
        prop_assert_eq!(by_bytes, parse_dns(&buf, len));
    }

    #[test]
    fn bytes_past_the_valid_length_are_never_read(
        labels in probe_like_labels(),
        qtype in prop::sample::select(vec![QTYPE_A, QTYPE_HINFO, QTYPE_TXT]),
        stale in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let msg = dns_query(1, &labels.join("."), qtype);
        let len = cut.index(msg.len() + 1);
        let mut whole = [stale; DNS_BUF_LEN];
        whole[..msg.len()].copy_from_slice(&msg);
        let mut cut_off = [stale; DNS_BUF_LEN];
        cut_off[..len].copy_from_slice(&msg[..len]);
        prop_assert_eq!(parse_dns(&whole, len), parse_dns(&cut_off, len));
    }

    #[test]
    fn tcp_framing_of_arbitrary_payloads_stays_inside(
        frame in prop::collection::vec(any::<u8>(), 0..300),
        offset in 0..320usize,
        held in 0..320usize,
        beyond in 0..70_000usize,
    ) {
        let segment = Segment {
            payload_offset: offset,
            payload_len: held,
            declared_payload_len: held + beyond,
            ..FrameSpec::default().expected_segment()
        };
        let framing = tcp_framing(&SlicePacket(&frame), &segment);
        prop_assert!(framing.count <= framing.messages.len());
        for msg in framing.messages() {
            prop_assert!(msg.offset >= offset + 2);
            prop_assert!(!msg.complete || msg.offset + msg.len <= offset + held);
        }
    }

    #[test]
    fn valid_frames_parse_back_to_their_inputs(inputs in frame_inputs()) {
        let spec = &inputs.spec;
        let frame = spec.build();
        let ports = DnsPorts::new(&[inputs.dns_port]);
        let segment = match classify(&SlicePacket(&frame), spec.link, &ports) {
            PacketClass::Dns(segment) => segment,
            other => panic!("{other:?}"),
        };
        prop_assert_eq!(segment, spec.expected_segment());
        let results = parse_messages(&frame, &segment);
        prop_assert_eq!(results.len(), 1);
        let (msg, parsed) = &results[0];
        prop_assert!(msg.complete);
        if spec.transport == Transport::Tcp {
            prop_assert_eq!(msg.offset, segment.payload_offset + 2);
        }
        let summary = parsed.unwrap();
        prop_assert_eq!(summary.header.id, inputs.id);
        let question = summary.question.unwrap();
        let lower_wire = wire_name(&inputs.labels.join(".").to_ascii_lowercase());
        prop_assert_eq!(question.name_hash, name_hash(&lower_wire));
        prop_assert_eq!(usize::from(question.name_len), lower_wire.len());
        prop_assert_eq!(usize::from(question.labels), inputs.labels.len());
        prop_assert_eq!((question.qtype, question.qclass), (inputs.qtype, QCLASS_IN));
        // Random names can be probes (`1.2.` is one for HINFO), but only with the probe's type.
        if question.probe != Probe::None {
            prop_assert!(matches!(inputs.qtype, QTYPE_HINFO | QTYPE_TXT));
        }
    }

    #[test]
    fn name_hash_ignores_ascii_case(labels in name_labels(), flips in any::<u64>()) {
        let name = labels.join(".");
        let flipped: String = name
            .chars()
            .enumerate()
            .map(|(i, c)| if flips >> (i % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
            .collect();
        prop_assert_eq!(name_hash(&wire_name(&name)), name_hash(&wire_name(&flipped)));
        let in_query = parse_bytes(&dns_query(1, &flipped, QTYPE_A)).unwrap().question.unwrap();
        prop_assert_eq!(in_query.name_hash, name_hash(&wire_name(&name)));
    }

    #[test]
    fn name_hash_tells_different_names_apart(a in name_labels(), b in name_labels()) {
        let (a, b) = (wire_name(&a.join(".")), wire_name(&b.join(".")));
        prop_assume!(!a.eq_ignore_ascii_case(&b));
        prop_assert_ne!(name_hash(&a), name_hash(&b));
    }
}
