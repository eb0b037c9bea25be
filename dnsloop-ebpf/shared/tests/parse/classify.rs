//! `classify` on crafted frames: every link layer, IP and transport branch.

use super::common::*;
use dnsloop_shared::parse::{
    classify, DnsPorts, IpFamily, LinkLayer, Malformed, PacketClass, Skip, SlicePacket,
    TooManyDnsPorts, Transport,
};

fn assert_parses_as_spec(spec: &FrameSpec) {
    let frame = spec.build();
    assert_eq!(
        classify_frame(&frame, spec.link),
        PacketClass::Dns(spec.expected_segment())
    );
}

fn malformed(frame: &[u8], link: LinkLayer) -> Malformed {
    match classify_frame(frame, link) {
        PacketClass::Malformed(reason) => reason,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

/// Overwrites bytes of the IP packet inside `frame`.
fn patch_l3(spec: &FrameSpec, frame: &mut [u8], at: usize, bytes: &[u8]) {
    let start = spec.link_header_len() + at;
    frame[start..start + bytes.len()].copy_from_slice(bytes);
}

// --- link layer -----------------------------------------------------------------------------

#[test]
fn every_link_layer_with_both_families_and_transports() {
    for link in ALL_LINKS {
        for ipv6 in [false, true] {
            for tcp in [false, true] {
                let mut spec = FrameSpec {
                    link,
                    ..FrameSpec::default()
                };
                if ipv6 {
                    spec = spec.ipv6();
                }
                if tcp {
                    spec = spec.tcp();
                }
                assert_parses_as_spec(&spec);
            }
        }
    }
}

#[test]
fn single_and_double_vlan_tags_on_every_ethertype_link() {
    for link in [
        LinkLayer::Ethernet,
        LinkLayer::LinuxSll,
        LinkLayer::LinuxSll2,
    ] {
        for vlan_tags in [1, 2] {
            assert_parses_as_spec(&FrameSpec {
                link,
                vlan_tags,
                ..FrameSpec::default()
            });
            assert_parses_as_spec(
                &FrameSpec {
                    link,
                    vlan_tags,
                    ..FrameSpec::default()
                }
                .ipv6(),
            );
        }
    }
}

#[test]
fn three_vlan_tags_are_not_walked() {
    let mut frame = link_header(LinkLayer::Ethernet, 2, 0x8100);
    frame.extend_from_slice(&[0, 102, 0x08, 0x00]);
    frame.extend_from_slice(&FrameSpec::default().ip_packet());
    assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotIp);
}

#[test]
fn loopback_ethernet_header_with_zero_macs() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    frame[..12].fill(0);
    assert_eq!(
        classify_frame(&frame, LinkLayer::Ethernet),
        PacketClass::Dns(spec.expected_segment())
    );
}

#[test]
fn non_ip_ethertypes_are_skipped() {
    let mut arp = link_header(LinkLayer::Ethernet, 0, 0x0806);
    arp.extend_from_slice(&[0; 28]);
    assert_eq!(skipped(&arp, LinkLayer::Ethernet), Skip::NotIp);
    let mut tagged_arp = link_header(LinkLayer::LinuxSll, 1, 0x0806);
    tagged_arp.extend_from_slice(&[0; 28]);
    assert_eq!(skipped(&tagged_arp, LinkLayer::LinuxSll), Skip::NotIp);
}

#[test]
fn raw_ip_takes_the_family_from_the_version_nibble() {
    assert_eq!(
        segment_of(&FrameSpec::default().ip_packet(), LinkLayer::RawIp).family,
        IpFamily::V4
    );
    assert_eq!(
        segment_of(&FrameSpec::default().ipv6().ip_packet(), LinkLayer::RawIp).family,
        IpFamily::V6
    );
    assert_eq!(skipped(&[0x50; 40], LinkLayer::RawIp), Skip::NotIp);
    assert_eq!(malformed(&[], LinkLayer::RawIp), Malformed::TruncatedL2);
}

#[test]
fn short_link_headers_are_truncated_l2() {
    for link in [
        LinkLayer::Ethernet,
        LinkLayer::LinuxSll,
        LinkLayer::LinuxSll2,
    ] {
        for vlan_tags in [0, 1, 2] {
            let spec = FrameSpec {
                link,
                vlan_tags,
                ..FrameSpec::default()
            };
            let frame = spec.build();
            for cut in 0..spec.link_header_len() {
                assert_eq!(
                    malformed(&frame[..cut], link),
                    Malformed::TruncatedL2,
                    "{link:?} {cut}"
                );
            }
        }
    }
}

#[test]
fn ip_version_must_match_the_ethertype() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 0, &[0x65]);
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadIpVersion
    );

    let spec = FrameSpec::default().ipv6();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 0, &[0x40]);
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadIpVersion
    );
}

// --- IPv4 -----------------------------------------------------------------------------------

#[test]
fn ipv4_options_for_every_header_length() {
    for ihl in 6..=15usize {
        // NOPs then an end-of-options byte; the parser skips options without reading them.
        let mut options = vec![1; (ihl - 5) * 4];
        *options.last_mut().unwrap() = 0;
        for tcp in [false, true] {
            let mut spec = FrameSpec {
                ipv4_options: options.clone(),
                ..FrameSpec::default()
            };
            if tcp {
                spec = spec.tcp();
            }
            assert_parses_as_spec(&spec);
        }
    }
}

#[test]
fn ipv4_header_length_below_five_words() {
    let spec = FrameSpec::default();
    for ihl in 0..5u8 {
        let mut frame = spec.build();
        patch_l3(&spec, &mut frame, 0, &[0x40 | ihl]);
        assert_eq!(malformed(&frame, LinkLayer::Ethernet), Malformed::BadIhl);
    }
}

#[test]
fn ipv4_options_cut_by_the_end_of_the_packet() {
    let spec = FrameSpec {
        ipv4_options: vec![1; 40],
        ..FrameSpec::default()
    };
    let frame = spec.build();
    let cut = spec.link_header_len() + 30;
    assert_eq!(
        malformed(&frame[..cut], LinkLayer::Ethernet),
        Malformed::TruncatedIpv4
    );
}

#[test]
fn ipv4_total_length_shorter_than_the_headers() {
    let spec = FrameSpec {
        ipv4_options: vec![1; 8],
        ..FrameSpec::default()
    };
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 2, &27u16.to_be_bytes());
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadIpLength
    );
    // Long enough for the IP header, not for the UDP header behind it.
    patch_l3(&spec, &mut frame, 2, &30u16.to_be_bytes());
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadIpLength
    );
}

#[test]
fn ipv4_total_length_ignores_link_padding() {
    // A short frame padded to Ethernet's 60-byte minimum: the padding is not payload.
    let spec = FrameSpec {
        payload: vec![0xee; 4],
        ..FrameSpec::default()
    };
    let mut frame = spec.build();
    frame.resize(60, 0);
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    assert_eq!(segment.payload_len, 4);
    assert_eq!(segment.declared_payload_len, 4);
}

#[test]
fn ipv4_zero_total_length_runs_to_the_end_of_the_packet() {
    // Linux BIG TCP aggregates over 64 KiB carry total length 0.
    let spec = FrameSpec::default().tcp();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 2, &[0, 0]);
    assert_eq!(
        segment_of(&frame, LinkLayer::Ethernet),
        spec.expected_segment()
    );
}

#[test]
fn ipv4_non_first_fragment_is_skipped() {
    let spec = FrameSpec {
        ipv4_fragment: (185, false),
        ..FrameSpec::default()
    };
    assert_eq!(
        skipped(&spec.build(), LinkLayer::Ethernet),
        Skip::NonFirstFragment
    );
    let spec = FrameSpec {
        ipv4_fragment: (1, true),
        ..FrameSpec::default()
    };
    assert_eq!(
        skipped(&spec.build(), LinkLayer::Ethernet),
        Skip::NonFirstFragment
    );
}

#[test]
fn ipv4_first_fragment_is_parsed_and_shows_the_cut() {
    // The UDP length declares the whole datagram; this fragment holds its first 24 bytes.
    let spec = FrameSpec {
        ipv4_fragment: (0, true),
        ..FrameSpec::default()
    };
    let mut frame = spec.build();
    let full = spec.payload.len();
    frame.truncate(spec.payload_offset() + 24);
    patch_l3(&spec, &mut frame, 2, &(20u16 + 8 + 24).to_be_bytes());
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    assert_eq!(segment.payload_len, 24);
    assert_eq!(segment.declared_payload_len, full);
}

#[test]
fn ipv4_other_protocols_are_skipped() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 9, &[1]); // ICMP
    assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotUdpOrTcp);
}

// --- IPv6 -----------------------------------------------------------------------------------

use ExtensionHeader::*;

#[test]
fn ipv6_extension_header_chain_including_a_first_fragment() {
    let chain = vec![
        HopByHop,
        DestinationOptions,
        Routing,
        Fragment {
            offset: 0,
            more: true,
        },
        Authentication,
        DestinationOptions,
    ];
    for tcp in [false, true] {
        let mut spec = FrameSpec {
            ipv6_extensions: chain.clone(),
            ..FrameSpec::default()
        }
        .ipv6();
        if tcp {
            spec = spec.tcp();
        }
        assert_parses_as_spec(&spec);
    }
}

#[test]
fn ipv6_authentication_header_counts_four_octet_units() {
    let spec = FrameSpec {
        ipv6_extensions: vec![Authentication],
        ..FrameSpec::default()
    }
    .ipv6();
    assert_eq!(
        segment_of(&spec.build(), LinkLayer::Ethernet).payload_offset,
        14 + 40 + 12 + 8
    );
}

#[test]
fn ipv6_seven_extension_headers_are_too_many() {
    let spec = FrameSpec {
        ipv6_extensions: vec![DestinationOptions; 7],
        ..FrameSpec::default()
    }
    .ipv6();
    assert_eq!(
        malformed(&spec.build(), LinkLayer::Ethernet),
        Malformed::TooManyExtensionHeaders
    );
    let six = FrameSpec {
        ipv6_extensions: vec![DestinationOptions; 6],
        ..FrameSpec::default()
    }
    .ipv6();
    assert_parses_as_spec(&six);
}

#[test]
fn ipv6_non_first_fragment_is_skipped() {
    let chain = vec![
        HopByHop,
        Fragment {
            offset: 181,
            more: true,
        },
    ];
    let spec = FrameSpec {
        ipv6_extensions: chain,
        ..FrameSpec::default()
    }
    .ipv6();
    assert_eq!(
        skipped(&spec.build(), LinkLayer::Ethernet),
        Skip::NonFirstFragment
    );
}

#[test]
fn ipv6_extension_header_cut_by_the_end_of_the_packet() {
    let spec = FrameSpec {
        ipv6_extensions: vec![HopByHop, Routing],
        ..FrameSpec::default()
    }
    .ipv6();
    let frame = spec.build();
    let routing_start = 14 + 40 + 16;
    assert_eq!(
        malformed(&frame[..routing_start + 1], LinkLayer::Ethernet),
        Malformed::TruncatedIpv6
    );
    assert_eq!(
        malformed(&frame[..14 + 39], LinkLayer::Ethernet),
        Malformed::TruncatedIpv6
    );
}

#[test]
fn ipv6_extension_header_beyond_the_payload_length() {
    let spec = FrameSpec {
        ipv6_extensions: vec![HopByHop],
        ..FrameSpec::default()
    }
    .ipv6();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 4, &1u16.to_be_bytes());
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadIpLength
    );
}

#[test]
fn ipv6_zero_payload_length_runs_to_the_end_of_the_packet() {
    let spec = FrameSpec::default().ipv6().tcp();
    let mut frame = spec.build();
    patch_l3(&spec, &mut frame, 4, &[0, 0]);
    assert_eq!(
        segment_of(&frame, LinkLayer::Ethernet),
        spec.expected_segment()
    );
}

#[test]
fn ipv6_other_upper_layers_are_skipped() {
    let spec = FrameSpec::default().ipv6();
    for next_header in [58, 59, 50] {
        // ICMPv6, no next header, ESP
        let mut frame = spec.build();
        patch_l3(&spec, &mut frame, 6, &[next_header]);
        assert_eq!(skipped(&frame, LinkLayer::Ethernet), Skip::NotUdpOrTcp);
    }
}

// --- UDP and TCP ----------------------------------------------------------------------------

#[test]
fn either_port_may_be_the_dns_port() {
    let query = FrameSpec::default();
    let response = FrameSpec {
        sport: 53,
        dport: 40000,
        ..FrameSpec::default()
    };
    assert_parses_as_spec(&query);
    assert_parses_as_spec(&response);
    let other = FrameSpec {
        sport: 40000,
        dport: 443,
        ..FrameSpec::default()
    };
    assert_eq!(
        skipped(&other.build(), LinkLayer::Ethernet),
        Skip::NotDnsPort
    );
    let frame = other.build();
    let ports = DnsPorts::new(&[53, 5353, 443]);
    assert!(matches!(
        classify(&SlicePacket(&frame), LinkLayer::Ethernet, &ports),
        PacketClass::Dns(_)
    ));
}

#[test]
fn dns_ports_hold_eight_refuse_a_ninth_and_never_match_port_zero() {
    let ports = DnsPorts::from_list(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    assert!((1..=8).all(|port| ports.contains(port)));
    assert!(!ports.contains(9));
    assert!(!ports.contains(0));
    // A ninth port is refused, not dropped; zeros are not ports and do not count.
    assert_eq!(
        DnsPorts::from_list(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        Err(TooManyDnsPorts { given: 9 })
    );
    assert_eq!(
        TooManyDnsPorts { given: 9 }.to_string(),
        "at most 8 DNS ports can be given, 9 were"
    );
    assert_eq!(
        DnsPorts::from_list(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 0]),
        Ok(ports)
    );
    assert!(!DnsPorts::new(&[53]).contains(0));
    // A 0 in the list neither matches nor hides the ports after it.
    let with_zero = DnsPorts::new(&[0, 53, 0, 5353]);
    assert!(with_zero.contains(53) && with_zero.contains(5353));
    assert!(!with_zero.contains(0));
    assert!(with_zero.contains_either(80, 5353) && !with_zero.contains_either(80, 443));
}

#[test]
fn udp_length_below_its_header() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    let udp = spec.payload_offset() - 8;
    frame[udp + 4..udp + 6].copy_from_slice(&7u16.to_be_bytes());
    assert_eq!(
        malformed(&frame, LinkLayer::Ethernet),
        Malformed::BadUdpLength
    );
}

#[test]
fn udp_length_beyond_the_packet_is_clamped() {
    let spec = FrameSpec::default();
    let mut frame = spec.build();
    let udp = spec.payload_offset() - 8;
    let declared = spec.payload.len() + 100;
    frame[udp + 4..udp + 6].copy_from_slice(&(8 + declared as u16).to_be_bytes());
    let segment = segment_of(&frame, LinkLayer::Ethernet);
    assert_eq!(segment.payload_len, spec.payload.len());
    assert_eq!(segment.declared_payload_len, declared);
}

#[test]
fn udp_header_cut_by_the_end_of_the_packet() {
    let spec = FrameSpec::default();
    let frame = spec.build();
    assert_eq!(
        malformed(&frame[..14 + 20 + 7], LinkLayer::Ethernet),
        Malformed::TruncatedL4
    );
}

#[test]
fn tcp_with_options() {
    // MSS, SACK permitted, timestamps, NOP padding: 20 bytes of options.
    let options = vec![
        2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0,
    ];
    let spec = FrameSpec {
        tcp_options: options.clone(),
        ..FrameSpec::default()
    }
    .tcp();
    assert_parses_as_spec(&spec);
    let spec = FrameSpec {
        tcp_options: vec![1; 40],
        ..FrameSpec::default()
    }
    .ipv6()
    .tcp();
    assert_parses_as_spec(&spec);
}

#[test]
fn tcp_data_offset_below_five_words() {
    let spec = FrameSpec::default().tcp();
    for data_offset in 0..5u8 {
        let mut frame = spec.build();
        let tcp = spec.payload_offset() - 20;
        frame[tcp + 12] = data_offset << 4;
        assert_eq!(
            malformed(&frame, LinkLayer::Ethernet),
            Malformed::BadTcpOffset
        );
    }
}

#[test]
fn tcp_options_beyond_the_datagram_or_the_packet() {
    let spec = FrameSpec {
        tcp_options: vec![1; 12],
        payload: Vec::new(),
        ..FrameSpec::default()
    };
    let spec = FrameSpec {
        transport: Transport::Tcp,
        ..spec
    };
    let frame = spec.build();
    assert_eq!(
        malformed(&frame[..frame.len() - 1], LinkLayer::Ethernet),
        Malformed::TruncatedL4
    );
    let mut short_ip = frame.clone();
    patch_l3(&spec, &mut short_ip, 2, &(20u16 + 20 + 4).to_be_bytes());
    assert_eq!(
        malformed(&short_ip, LinkLayer::Ethernet),
        Malformed::BadIpLength
    );
}

#[test]
fn tcp_without_payload_is_a_dns_segment_with_nothing_in_it() {
    let spec = FrameSpec {
        transport: Transport::Tcp,
        payload: Vec::new(),
        ..FrameSpec::default()
    };
    let segment = segment_of(&spec.build(), LinkLayer::Ethernet);
    assert_eq!((segment.payload_len, segment.declared_payload_len), (0, 0));
}
