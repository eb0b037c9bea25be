//! Capture files as tcpdump, dumpcap and dnsloop write them, crafted here frame by frame.
use std::{
    borrow::Cow,
    io::Write as _,
    net::IpAddr,
    path::Path,
    time::{Duration, SystemTime},
};

use dnsloop_frames::{dns_query, FrameSpec, QTYPE_A};
use dnsloop_shared::{
    parse::{DnsPorts, LinkLayer},
    point::Direction,
};
use pcap_file::{
    pcap::{PcapHeader, PcapPacket, PcapWriter},
    pcapng::{
        blocks::{
            enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption},
            interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
            simple_packet::SimplePacketBlock,
        },
        PcapNgWriter,
    },
    DataLink, TsResolution,
};

use super::{
    order::TimeOrder,
    placement::{role_of_name, Placement, Survey},
    CaptureError, CaptureFile, CapturedPacket,
};
use crate::{
    bundle::pcapng::{InterfaceRecord, PcapngOptions, PcapngWriter},
    observation::Namespace,
    points::{LinkDescription, Role},
};

const DNS: [u16; 1] = [53];
/// 2025-01-01T12:00:00Z.
const BASE_SECONDS: u64 = 1_735_732_800;
const CLIENT: &str = "10.244.0.2";
const COREDNS: &str = "10.244.0.3";
const NODE_CACHE: &str = "169.254.25.10";
const NODE_UPLINK: &str = "10.255.0.1";
const NODE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const COREDNS_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x03];

fn at(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(BASE_SECONDS) + Duration::from_millis(millis)
}

fn since_epoch(millis: u64) -> Duration {
    at(millis).duration_since(SystemTime::UNIX_EPOCH).unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A query from `src` to `dst` on `link`.
fn query(link: LinkLayer, src: &str, dst: &str, id: u16) -> FrameSpec {
    FrameSpec {
        link,
        src: ip(src),
        dst: ip(dst),
        payload: dns_query(id, "www.example.test", QTYPE_A),
        ..FrameSpec::default()
    }
}

/// An Ethernet frame from MAC `from` to MAC `to`.
fn ethernet(from: [u8; 6], to: [u8; 6], src: &str, dst: &str, id: u16) -> Vec<u8> {
    let mut frame = query(LinkLayer::Ethernet, src, dst, id).build();
    frame[0..6].copy_from_slice(&to);
    frame[6..12].copy_from_slice(&from);
    frame
}

/// A cooked v1 frame with packet type `packet_type` and hardware type `hatype`.
fn sll(packet_type: u16, hatype: u16, src: &str, dst: &str) -> Vec<u8> {
    let mut frame = query(LinkLayer::LinuxSll, src, dst, 1).build();
    frame[0..2].copy_from_slice(&packet_type.to_be_bytes());
    frame[2..4].copy_from_slice(&hatype.to_be_bytes());
    frame
}

/// A cooked v2 frame seen on interface `ifindex` with packet type `packet_type`.
fn sll2(ifindex: u32, packet_type: u8, src: &str, dst: &str) -> Vec<u8> {
    let mut frame = query(LinkLayer::LinuxSll2, src, dst, 1).build();
    frame[4..8].copy_from_slice(&ifindex.to_be_bytes());
    frame[10] = packet_type;
    frame
}

fn pcap(datalink: DataLink, resolution: TsResolution, packets: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let header = PcapHeader {
        datalink,
        ts_resolution: resolution,
        snaplen: 262_144,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(Vec::new(), header).unwrap();
    for (millis, data) in packets {
        let length = data.len() as u32;
        writer
            .write_packet(&PcapPacket::new(since_epoch(*millis), length, data))
            .unwrap();
    }
    writer.into_writer()
}

/// Writes `bytes` to a file of its own.
fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(bytes).unwrap();
    file
}

/// Every packet of the file at `path`, and how reading ended.
fn read_all(path: &Path) -> (Vec<CapturedPacket>, CaptureFile) {
    let mut capture = CaptureFile::open(path).unwrap();
    let packets = std::iter::from_fn(|| capture.next_packet()).collect();
    (packets, capture)
}

/// Reads `path` through, surveys it and places every packet as `analyze` does.
fn placed(path: &Path) -> Vec<(CapturedPacket, std::sync::Arc<crate::observation::Point>)> {
    let (packets, capture) = read_all(path);
    let mut survey = Survey::default();
    for packet in &packets {
        survey.observe(packet, &DnsPorts::new(&DNS));
    }
    let mut placement = Placement::new(capture.interfaces(), &survey, DnsPorts::new(&DNS));
    packets
        .into_iter()
        .map(|packet| {
            let point = placement.place(&packet).expect("every interface is listed");
            (packet, point)
        })
        .collect()
}

fn names(point: &crate::observation::Point) -> (Option<String>, Option<String>) {
    (
        point.leaves.as_ref().map(ToString::to_string),
        point.enters.as_ref().map(ToString::to_string),
    )
}

fn some(leaves: &str, enters: &str) -> (Option<String>, Option<String>) {
    (Some(leaves.into()), Some(enters.into()))
}

#[test]
fn every_link_type_reads_as_the_same_dns_packet() {
    let spec = |link| query(link, CLIENT, NODE_CACHE, 7);
    let mut loopback = 2u32.to_ne_bytes().to_vec();
    loopback.extend(spec(LinkLayer::RawIp).build());
    let mut bsd_loop = 2u32.to_be_bytes().to_vec();
    bsd_loop.extend(spec(LinkLayer::RawIp).build());
    let cases = [
        (
            DataLink::ETHERNET,
            spec(LinkLayer::Ethernet).build(),
            LinkLayer::Ethernet,
        ),
        (
            DataLink::RAW,
            spec(LinkLayer::RawIp).build(),
            LinkLayer::RawIp,
        ),
        (
            DataLink::IPV4,
            spec(LinkLayer::RawIp).build(),
            LinkLayer::RawIp,
        ),
        (
            DataLink::LINUX_SLL,
            spec(LinkLayer::LinuxSll).build(),
            LinkLayer::LinuxSll,
        ),
        (
            DataLink::LINUX_SLL2,
            spec(LinkLayer::LinuxSll2).build(),
            LinkLayer::LinuxSll2,
        ),
        (DataLink::NULL, loopback, LinkLayer::RawIp),
        (DataLink::LOOP, bsd_loop, LinkLayer::RawIp),
    ];
    let mut decoder =
        crate::decode::Decoder::new(DnsPorts::new(&DNS), crate::decode::Coverage::EveryPacket);
    for (datalink, frame, layer) in cases {
        let capture = file(&pcap(datalink, TsResolution::MicroSecond, &[(5, frame)]));
        let placed = placed(capture.path());
        assert_eq!(placed.len(), 1, "{datalink:?}");
        let (captured, point) = &placed[0];
        assert_eq!(captured.packet.link_layer, layer, "{datalink:?}");
        assert_eq!(captured.packet.ts, at(5), "{datalink:?}");
        let mut observations = Vec::new();
        decoder
            .decode(&captured.packet, |_| Some(point), &mut observations)
            .unwrap_or_else(|error| panic!("{datalink:?}: {error:?}"));
        assert_eq!(observations[0].id, 7, "{datalink:?}");
        assert_eq!(observations[0].src.ip(), ip(CLIENT), "{datalink:?}");
    }
}

#[test]
fn an_unknown_link_type_is_counted_not_read() {
    let capture = file(&pcap(
        DataLink::IEEE802_11,
        TsResolution::MicroSecond,
        &[(1, vec![0; 40])],
    ));
    let (packets, capture) = read_all(capture.path());
    assert!(packets.is_empty());
    assert_eq!((capture.packets(), capture.skipped()), (1, 1));
    assert_eq!(capture.interfaces()[0].link_layer, None);
}

#[test]
fn nanosecond_pcap_keeps_its_nanoseconds() {
    let frame = query(LinkLayer::RawIp, CLIENT, NODE_CACHE, 1).build();
    let header = PcapHeader {
        datalink: DataLink::RAW,
        ts_resolution: TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(Vec::new(), header).unwrap();
    let ts = since_epoch(0) + Duration::from_nanos(123_456_789);
    writer
        .write_packet(&PcapPacket::new(ts, frame.len() as u32, &frame))
        .unwrap();
    let capture = file(&writer.into_writer());
    let (packets, _) = read_all(capture.path());
    assert_eq!(packets[0].packet.ts, SystemTime::UNIX_EPOCH + ts);
}

#[test]
fn cooked_v1_tells_direction_and_its_loopback_packets() {
    let packets = [
        (1, sll(0, 1, CLIENT, NODE_CACHE)),
        (2, sll(4, 1, NODE_UPLINK, COREDNS)),
        (3, sll(0, 772, "127.0.0.1", "127.0.0.1")),
    ];
    let capture = file(&pcap(
        DataLink::LINUX_SLL,
        TsResolution::MicroSecond,
        &packets,
    ));
    let placed = placed(capture.path());
    let seen: Vec<_> = placed
        .iter()
        .map(|(captured, point)| (captured.direction, point.ifname.to_string(), names(point)))
        .collect();
    assert_eq!(
        seen,
        [
            (
                Some(Direction::Ingress),
                "any".into(),
                some(&format!("host {CLIENT}"), "node")
            ),
            (
                Some(Direction::Egress),
                "any".into(),
                some("node", &format!("host {COREDNS}"))
            ),
            (Some(Direction::Ingress), "lo".into(), some("node", "node")),
        ]
    );
}

#[test]
fn cooked_v2_makes_each_interface_number_an_interface() {
    let packets = [
        (1, sll2(5, 0, CLIENT, NODE_CACHE)),
        (2, sll2(3, 0, CLIENT, NODE_CACHE)),
        (3, sll2(3, 4, NODE_UPLINK, COREDNS)),
        (4, sll2(5, 2, CLIENT, NODE_CACHE)),
    ];
    let capture = file(&pcap(
        DataLink::LINUX_SLL2,
        TsResolution::MicroSecond,
        &packets,
    ));
    let placed = placed(capture.path());
    let seen: Vec<_> = placed
        .iter()
        .map(|(captured, point)| {
            (
                captured.packet.seen.interface.ifindex,
                point.ifname.to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (0, "ifindex 5".into()),
            (1, "ifindex 3".into()),
            (1, "ifindex 3".into()),
            (0, "ifindex 5".into())
        ]
    );
    assert_eq!(placed[2].1.direction, Direction::Egress);
    assert_eq!(placed[3].1.direction, Direction::Ingress);
}

#[test]
fn an_interface_to_addresses_no_pod_of_the_node_holds_leads_off_the_node() {
    // `tcpdump -i any` on a node: the pods' veths each lead to one address; the overlay to
    // other nodes' pods.
    let other_node_pod = "10.244.1.3";
    let packets = [
        (1, sll2(5, 0, COREDNS, NODE_CACHE)),
        (2, sll2(5, 4, NODE_UPLINK, COREDNS)),
        (3, sll2(4, 0, CLIENT, NODE_CACHE)),
        (4, sll2(8, 4, NODE_UPLINK, other_node_pod)),
        (5, sll2(8, 0, "10.244.1.0", COREDNS)),
    ];
    let capture = file(&pcap(
        DataLink::LINUX_SLL2,
        TsResolution::MicroSecond,
        &packets,
    ));
    let placed = placed(capture.path());
    let points: Vec<_> = placed.iter().map(|(_, point)| names(point)).collect();
    assert_eq!(points[0], some("host 10.244.0.3", "node"), "a pod's veth");
    assert_eq!(points[1], some("node", "host 10.244.0.3"));
    assert_eq!(points[3], (Some("node".into()), None), "off the node");
    assert_eq!(points[4], (None, Some("node".into())), "back onto it");
}

fn idb(
    linktype: DataLink,
    options: Vec<InterfaceDescriptionOption<'static>>,
) -> InterfaceDescriptionBlock<'static> {
    InterfaceDescriptionBlock {
        linktype,
        snaplen: 0,
        options,
    }
}

fn epb(
    interface_id: u32,
    ticks: u64,
    data: Vec<u8>,
    flags: Option<u32>,
) -> EnhancedPacketBlock<'static> {
    EnhancedPacketBlock {
        interface_id,
        // pcap-file writes the duration's nanoseconds as the raw count.
        timestamp: Duration::from_nanos(ticks),
        original_len: data.len() as u32,
        data: Cow::Owned(data),
        options: flags.map(EnhancedPacketOption::Flags).into_iter().collect(),
    }
}

#[test]
fn pcapng_interfaces_keep_their_link_types_names_resolutions_and_directions() {
    let mut writer = PcapNgWriter::new(Vec::new()).unwrap();
    // cni0: Ethernet, microseconds (the default); wg0: raw IP, nanoseconds.
    writer
        .write_pcapng_block(idb(
            DataLink::ETHERNET,
            vec![InterfaceDescriptionOption::IfName("cni0".into())],
        ))
        .unwrap();
    writer
        .write_pcapng_block(idb(
            DataLink::RAW,
            vec![
                InterfaceDescriptionOption::IfName("wg0".into()),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        ))
        .unwrap();
    let micros = since_epoch(10).as_micros() as u64;
    let nanos = since_epoch(11).as_nanos() as u64;
    let from_client = ethernet(CLIENT_MAC, NODE_MAC, CLIENT, NODE_CACHE, 1);
    writer
        .write_pcapng_block(epb(0, micros, from_client.clone(), Some(0b01)))
        .unwrap();
    writer
        .write_pcapng_block(epb(
            1,
            nanos,
            query(LinkLayer::RawIp, NODE_UPLINK, "10.255.0.53", 2).build(),
            Some(0b10),
        ))
        .unwrap();
    writer
        .write_pcapng_block(SimplePacketBlock {
            original_len: from_client.len() as u32,
            data: Cow::Owned(from_client),
        })
        .unwrap();
    let capture = file(&writer.into_inner());
    let placed = placed(capture.path());
    let seen: Vec<_> = placed
        .iter()
        .map(|(captured, point)| {
            (
                captured.packet.ts,
                point.ifname.to_string(),
                point.direction,
                names(point),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            // cni0 is a bridge: ingress enters the node.
            (
                at(10),
                "cni0".into(),
                Direction::Ingress,
                (None, Some("node".into()))
            ),
            // wg0 is between the node and the outside.
            (
                at(11),
                "wg0".into(),
                Direction::Egress,
                (Some("node".into()), None)
            ),
            // A simple packet belongs to the first interface, at the previous packet's time.
            (
                at(11),
                "cni0".into(),
                Direction::Ingress,
                (
                    Some(format!("host {CLIENT}")),
                    Some(format!("host {NODE_CACHE}"))
                )
            ),
        ]
    );
}

#[test]
fn names_suggest_roles() {
    assert_eq!(role_of_name("lo", false), Role::Loopback);
    for bridge in [
        "cni0",
        "cbr0",
        "docker0",
        "br-1a2b3c",
        "kube-bridge",
        "weave",
    ] {
        assert_eq!(role_of_name(bridge, false), Role::BridgeMaster, "{bridge}");
    }
    for veth in [
        "veth1234abcd",
        "cali0123456789a",
        "lxc12ab",
        "eni0a1b2c3",
        "gke1234",
    ] {
        assert_eq!(
            role_of_name(veth, true),
            Role::Veth { bridged: true },
            "{veth}"
        );
        assert_eq!(
            role_of_name(veth, false),
            Role::Veth { bridged: false },
            "{veth}"
        );
    }
    for other in ["eth0", "ens5", "flannel.1", "vxlan.calico", "tunl0", "wg0"] {
        assert_eq!(
            role_of_name(other, true),
            Role::Other { bridged: false },
            "{other}"
        );
    }
}

#[test]
fn a_veth_is_a_bridge_port_when_the_capture_has_a_bridge() {
    let mut writer = PcapNgWriter::new(Vec::new()).unwrap();
    for name in ["cni0", "veth-client"] {
        writer
            .write_pcapng_block(idb(
                DataLink::ETHERNET,
                vec![InterfaceDescriptionOption::IfName(name.into())],
            ))
            .unwrap();
    }
    let frame = ethernet(CLIENT_MAC, NODE_MAC, CLIENT, NODE_CACHE, 1);
    let micros = since_epoch(1).as_micros() as u64;
    writer
        .write_pcapng_block(epb(1, micros, frame.clone(), Some(0b01)))
        .unwrap();
    writer
        .write_pcapng_block(epb(0, micros, frame, Some(0b01)))
        .unwrap();
    let capture = file(&writer.into_inner());
    let placed = placed(capture.path());
    assert_eq!(names(&placed[0].1), (Some("pod@veth-client".into()), None));
    assert_eq!(names(&placed[1].1), (None, Some("node".into())));
}

#[test]
fn a_dnsloop_description_places_as_live() {
    let described = LinkDescription {
        role: Role::Veth { bridged: true },
        namespace: Some(Namespace::new("pod 10.244.0.3")),
        gateway: None,
    };
    let mut writer = PcapNgWriter::new(Vec::new()).unwrap();
    writer
        .write_pcapng_block(idb(
            DataLink::ETHERNET,
            vec![
                InterfaceDescriptionOption::IfName("veth-coredns-a".into()),
                InterfaceDescriptionOption::IfDescription(described.to_string().into()),
            ],
        ))
        .unwrap();
    let micros = since_epoch(1).as_micros() as u64;
    for flags in [0b01, 0b10] {
        writer
            .write_pcapng_block(epb(
                0,
                micros,
                ethernet(COREDNS_MAC, NODE_MAC, COREDNS, NODE_CACHE, 1),
                Some(flags),
            ))
            .unwrap();
    }
    let capture = file(&writer.into_inner());
    let placed = placed(capture.path());
    let points = described.points("veth-coredns-a");
    assert_eq!(&placed[0].1, points.get(Direction::Ingress, false));
    assert_eq!(&placed[1].1, points.get(Direction::Egress, false));
}

#[test]
fn macs_tell_which_side_is_the_node() {
    // tcpdump -i cni0: the client asks the node cache, the cache forwards to CoreDNS from
    // its uplink address, CoreDNS forwards back to the cache. The node's MAC fronts the cache
    // and the uplink address; each pod's only its own.
    let frames = [
        (1, ethernet(CLIENT_MAC, NODE_MAC, CLIENT, NODE_CACHE, 1)),
        (2, ethernet(NODE_MAC, COREDNS_MAC, NODE_UPLINK, COREDNS, 2)),
        (3, ethernet(COREDNS_MAC, NODE_MAC, COREDNS, NODE_CACHE, 3)),
        // A pod talking to a pod across the bridge.
        (4, ethernet(COREDNS_MAC, CLIENT_MAC, COREDNS, CLIENT, 4)),
    ];
    let capture = file(&pcap(
        DataLink::ETHERNET,
        TsResolution::MicroSecond,
        &frames,
    ));
    let placed = placed(capture.path());
    let seen: Vec<_> = placed
        .iter()
        .map(|(_, point)| (point.direction, names(point)))
        .collect();
    assert_eq!(
        seen,
        [
            (Direction::Ingress, some(&format!("host {CLIENT}"), "node")),
            (Direction::Egress, some("node", &format!("host {COREDNS}"))),
            (Direction::Ingress, some(&format!("host {COREDNS}"), "node")),
            (
                Direction::Ingress,
                some(&format!("host {COREDNS}"), &format!("host {CLIENT}"))
            ),
        ]
    );
}

#[test]
fn without_a_mac_fronting_two_addresses_every_packet_goes_host_to_host() {
    let frames = [
        (1, ethernet(CLIENT_MAC, NODE_MAC, CLIENT, "10.96.0.10", 1)),
        (2, ethernet(COREDNS_MAC, CLIENT_MAC, COREDNS, CLIENT, 1)),
    ];
    let capture = file(&pcap(
        DataLink::ETHERNET,
        TsResolution::MicroSecond,
        &frames,
    ));
    let placed = placed(capture.path());
    assert_eq!(
        names(&placed[0].1),
        some(&format!("host {CLIENT}"), "host 10.96.0.10")
    );
    assert_eq!(
        names(&placed[1].1),
        some(&format!("host {COREDNS}"), &format!("host {CLIENT}"))
    );
}

#[test]
fn files_that_are_not_captures_say_what_they_are() {
    let error = |bytes: &[u8]| {
        let capture = file(bytes);
        CaptureFile::open(capture.path()).err().expect("refused")
    };
    assert!(matches!(error(b""), CaptureError::Empty { .. }));
    let text = error(b"; <<>> DiG 9.18 <<>> example.test\n").to_string();
    assert!(
        text.contains("not a pcap or pcapng capture (it starts with text)"),
        "{text}"
    );
    let gzip = error(&[0x1f, 0x8b, 8, 0, 0, 0]).to_string();
    assert!(gzip.contains("gunzip it first"), "{gzip}");
    let header = error(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]).to_string();
    assert!(
        header.contains("header is damaged or cut short"),
        "{header}"
    );
    let missing = CaptureFile::open(Path::new("/nonexistent/capture.pcap"))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        missing.contains("cannot open /nonexistent/capture.pcap"),
        "{missing}"
    );
}

/// A small capture of each format, and how many packets each holds.
fn small_captures() -> Vec<(&'static str, Vec<u8>, usize)> {
    let frames: Vec<(u64, Vec<u8>)> = (0..3)
        .map(|n| {
            (
                n,
                ethernet(CLIENT_MAC, NODE_MAC, CLIENT, NODE_CACHE, n as u16),
            )
        })
        .collect();
    let pcap = pcap(DataLink::ETHERNET, TsResolution::MicroSecond, &frames);
    let mut writer = PcapNgWriter::new(Vec::new()).unwrap();
    writer
        .write_pcapng_block(idb(
            DataLink::ETHERNET,
            vec![InterfaceDescriptionOption::IfName("cni0".into())],
        ))
        .unwrap();
    for (millis, frame) in &frames {
        let micros = since_epoch(*millis).as_micros() as u64;
        writer
            .write_pcapng_block(epb(0, micros, frame.clone(), Some(0b01)))
            .unwrap();
    }
    vec![("pcap", pcap, 3), ("pcapng", writer.into_inner(), 3)]
}

#[test]
fn a_file_cut_anywhere_gives_what_it_holds_and_says_where_it_stopped() {
    for (format, whole, count) in small_captures() {
        let header = header_len(&whole);
        // The crafted records all have one size.
        let record = (whole.len() - header) / count;
        for cut in 0..whole.len() {
            let capture = file(&whole[..cut]);
            let Ok(mut opened) = CaptureFile::open(capture.path()) else {
                assert!(cut < header, "{format} cut at {cut}: refused");
                continue;
            };
            let packets = std::iter::from_fn(|| opened.next_packet()).count();
            if cut < header {
                assert_eq!(packets, 0, "{format} cut at {cut}");
                continue;
            }
            assert_eq!(packets, (cut - header) / record, "{format} cut at {cut}");
            // Cut between two records the file is simply shorter; inside one, it says so.
            let inside_a_record = !(cut - header).is_multiple_of(record);
            assert_eq!(
                opened.stopped().is_some(),
                inside_a_record,
                "{format} cut at {cut}"
            );
        }
        let capture = file(&whole);
        let (packets, opened) = read_all(capture.path());
        assert_eq!(packets.len(), count, "{format}");
        assert!(opened.stopped().is_none(), "{format}");
    }
}

/// The bytes before the first packet record of a crafted capture.
fn header_len(whole: &[u8]) -> usize {
    match whole[0] {
        // pcapng: the section header and one interface block, each with their own length.
        0x0a => {
            let shb = u32::from_ne_bytes(whole[4..8].try_into().unwrap()) as usize;
            let idb = u32::from_ne_bytes(whole[shb + 4..shb + 8].try_into().unwrap()) as usize;
            shb + idb
        }
        _ => 24,
    }
}

#[test]
fn damaged_bytes_never_panic() {
    for (format, whole, _) in small_captures() {
        for at in 0..whole.len() {
            for value in [0x00, 0xff, 0x80] {
                let mut damaged = whole.clone();
                damaged[at] = value;
                let capture = file(&damaged);
                if let Ok(mut opened) = CaptureFile::open(capture.path()) {
                    // A damaged length can split one record into several: each takes at least
                    // its 16-byte record header.
                    let read = std::iter::from_fn(|| opened.next_packet()).count();
                    assert!(read <= damaged.len() / 16, "{format} damaged at {at}");
                }
            }
        }
    }
}

#[test]
fn packets_come_out_in_timestamp_order() {
    let frames: Vec<(u64, Vec<u8>)> = [30, 10, 20, 40, 35]
        .into_iter()
        .map(|millis| {
            (
                millis,
                query(LinkLayer::RawIp, CLIENT, NODE_CACHE, millis as u16).build(),
            )
        })
        .collect();
    let capture = file(&pcap(DataLink::RAW, TsResolution::MicroSecond, &frames));
    let (packets, _) = read_all(capture.path());
    let mut survey = Survey::default();
    for packet in &packets {
        survey.observe(packet, &DnsPorts::new(&DNS));
    }
    assert_eq!(survey.disorder, Duration::from_millis(20));
    let mut order = TimeOrder::new(survey.disorder);
    let mut released = Vec::new();
    for packet in packets {
        order.push(packet);
        released.extend(std::iter::from_fn(|| order.pop_due()));
    }
    released.extend(std::iter::from_fn(|| order.pop()));
    let times: Vec<SystemTime> = released.iter().map(|packet| packet.packet.ts).collect();
    assert_eq!(times, [at(10), at(20), at(30), at(35), at(40)]);
}

/// The pcapng writer's output, read back by this source, is the packets it was given, placed
/// where they were seen.
#[test]
fn what_the_pcapng_writer_writes_reads_back_as_it_was_seen() {
    let veth = LinkDescription {
        role: Role::Veth { bridged: true },
        namespace: Some(Namespace::new("pod 10.244.0.2")),
        gateway: None,
    };
    let pod_loopback = LinkDescription {
        role: Role::Loopback,
        namespace: Some(Namespace::new("pod 10.244.0.3")),
        gateway: None,
    };
    let packet =
        |millis: u64, link, ifindex: u32, direction, frame: Vec<u8>| crate::source::RawPacket {
            ts: at(millis) + Duration::from_nanos(123),
            seen: crate::points::Seen {
                interface: crate::points::InterfaceRef {
                    netns_cookie: u64::from(ifindex) * 1000,
                    ifindex,
                },
                direction,
                via_gateway: false,
            },
            link_layer: link,
            bytes: frame.into(),
            matched_query: None,
            priors: Vec::new(),
            recorder_only: false,
        };
    let sent = [
        (
            packet(
                1,
                LinkLayer::Ethernet,
                4,
                Direction::Ingress,
                ethernet(CLIENT_MAC, NODE_MAC, CLIENT, NODE_CACHE, 1),
            ),
            ("veth-client", &veth),
        ),
        (
            packet(
                2,
                LinkLayer::Ethernet,
                1,
                Direction::Egress,
                query(LinkLayer::Ethernet, "127.0.0.1", "127.0.0.1", 2).build(),
            ),
            ("lo", &pod_loopback),
        ),
        (
            packet(
                3,
                LinkLayer::Ethernet,
                4,
                Direction::Egress,
                ethernet(NODE_MAC, CLIENT_MAC, NODE_CACHE, CLIENT, 1),
            ),
            ("veth-client", &veth),
        ),
    ];
    let written = tempfile::NamedTempFile::new().unwrap();
    let mut writer = PcapngWriter::new(
        written.reopen().unwrap(),
        PcapngOptions {
            hold: Duration::from_secs(1),
            max_bytes: u64::MAX,
            dns_ports: DnsPorts::new(&DNS),
        },
    )
    .unwrap();
    for (packet, (name, description)) in &sent {
        writer
            .packet(packet.clone(), InterfaceRecord { name, description })
            .unwrap();
    }
    let report = writer.finish().unwrap();
    assert_eq!(report.packets, 3);

    let placed = placed(written.path());
    assert_eq!(placed.len(), 3);
    for ((read, point), (sent, (name, description))) in placed.iter().zip(&sent) {
        assert_eq!(read.packet.ts, sent.ts);
        assert_eq!(read.packet.bytes, sent.bytes);
        assert_eq!(read.packet.link_layer, sent.link_layer);
        assert_eq!(read.direction, Some(sent.seen.direction));
        let live = description
            .points(name)
            .get(sent.seen.direction, false)
            .clone();
        assert_eq!(point, &live, "{name}");
    }
}
