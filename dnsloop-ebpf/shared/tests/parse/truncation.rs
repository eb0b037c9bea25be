//! Valid frames cut at every length: never a panic, never an offset outside the packet, and
//! never a DNS message parsed from bytes that are not there.

use super::common::*;
use dnsloop_shared::parse::{LinkLayer, PacketClass};
use ExtensionHeader::*;

fn valid_frames() -> Vec<FrameSpec> {
    let tcp_options = vec![2, 4, 5, 0xb4, 1, 1, 1, 0];
    let extensions = vec![
        HopByHop,
        Routing,
        Fragment {
            offset: 0,
            more: true,
        },
        Authentication,
    ];
    vec![
        FrameSpec::default(),
        FrameSpec {
            ipv4_options: vec![1; 12],
            vlan_tags: 1,
            ..FrameSpec::default()
        },
        FrameSpec {
            tcp_options: tcp_options.clone(),
            vlan_tags: 2,
            ..FrameSpec::default()
        }
        .tcp(),
        FrameSpec {
            ipv6_extensions: extensions.clone(),
            ..FrameSpec::default()
        }
        .ipv6(),
        FrameSpec {
            ipv6_extensions: extensions,
            tcp_options,
            ..FrameSpec::default()
        }
        .ipv6()
        .tcp(),
        FrameSpec {
            link: LinkLayer::RawIp,
            ..FrameSpec::default()
        }
        .ipv6(),
        FrameSpec {
            link: LinkLayer::LinuxSll,
            ..FrameSpec::default()
        }
        .tcp(),
        FrameSpec {
            link: LinkLayer::LinuxSll2,
            vlan_tags: 2,
            ..FrameSpec::default()
        }
        .ipv6(),
    ]
}

#[test]
fn every_cut_of_a_valid_frame() {
    for spec in valid_frames() {
        let frame = spec.build();
        let payload_offset = spec.payload_offset();
        for cut in 0..frame.len() {
            let cut_frame = &frame[..cut];
            match classify_frame(cut_frame, spec.link) {
                PacketClass::Malformed(_) => {
                    assert!(
                        cut < payload_offset,
                        "{spec:?} cut at {cut}: malformed payload"
                    )
                }
                PacketClass::Skip(reason) => panic!("{spec:?} cut at {cut}: skipped as {reason:?}"),
                PacketClass::DnsPortUnreachable => panic!("{spec:?} cut at {cut}: taken for ICMP"),
                PacketClass::Dns(segment) => {
                    assert!(
                        cut >= payload_offset,
                        "{spec:?} cut at {cut}: DNS without headers"
                    );
                    assert_eq!(segment.payload_offset, payload_offset);
                    assert_eq!(segment.payload_offset + segment.payload_len, cut);
                    assert_eq!(segment.declared_payload_len, spec.payload.len());
                    for (msg, parsed) in parse_messages(cut_frame, &segment) {
                        assert!(!msg.complete, "{spec:?} cut at {cut}: {msg:?} complete");
                        assert!(parsed.is_err(), "{spec:?} cut at {cut}: parsed {parsed:?}");
                    }
                }
            }
        }
        let segment = segment_of(&frame, spec.link);
        let results = parse_messages(&frame, &segment);
        assert_eq!(results.len(), 1);
        assert!(results
            .iter()
            .all(|(msg, parsed)| msg.complete && parsed.is_ok()));
    }
}
