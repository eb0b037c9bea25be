//! The userspace decode path under the fuzzer: packet bytes -> decoder -> analyzers -> the
//! text and JSON sinks, as `analyze` runs it (`cargo xtask fuzz`, target `decode_packets`).
//!
//! The input is a sequence of packets, each seen at one of the observation points of a node
//! like the lab's, so that the analyzers see queries and their answers, forwards and loops:
//!
//! ```text
//! per packet: i16 LE   milliseconds since the previous packet (negative: out of order)
//!             u8       low 4 bits: the point (`links()`, ingress then egress of each link);
//!                      bits 4-5: the link layer (Ethernet, raw IP, Linux SLL, Linux SLL2);
//!                      bit 6: a matched query follows; bit 7: a prior sighting follows
//!             u16 LE   the frame's length (cut to the bytes left)
//!   [matched query, what the kernel's record of a reply from an unexpected source or of a
//!    resent query adds]
//!             i16 LE   milliseconds before the packet it was sent
//!             u8       bit 0: seen in egress (ingress if not), on the packet's link; bit 1:
//!                      via the bridge's own address
//!             16 bytes the server it was sent to (IPv4 in the first 4)
//!             u16 LE   the server's port
//!   [prior sighting, what the kernel's record of the query that made its question hot adds]
//!             i16 LE   milliseconds before the packet it was seen
//!             u8       bit 0: egress; bit 1: TCP; bit 2: IPv6 addresses; bits 3-5: its link;
//!                      bit 6: via the bridge's own address
//!             16 bytes source address, then u16 LE source port
//!             16 bytes destination address, then u16 LE destination port
//!             u16 LE   DNS id
//!   [then]    bytes    the frame
//! ```
//!
//! A link is a pair of points, ingress then egress (`links()`); on a bridge port, a frame's MACs
//! say whether it went to or came from the bridge itself, as the kernel decides. An input that ends inside a
//! header ends the sequence. Built with the `fuzzing` feature and in
//! this crate's tests, which write the seed corpus and hold a regression test of every crash
//! the fuzzer found.
use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::{
    parse::{DnsPorts, IpFamily, LinkLayer},
    point::Direction,
};

use crate::{
    analyzers::{Engine, EngineConfig},
    decode::{Coverage, Decoder},
    observation::{Namespace, Point},
    pipeline::Pipeline,
    points::{InterfaceRef, LinkDescription, LinkPoints, Role, Seen, NODE},
    present::names::Names,
    schema::{CaptureFileSummary, CapturePackets, Record, SummarySource},
    sink,
    sink::OutputFormat,
    source::{socket_addr, MatchedQuery, PriorSighting, RawPacket},
};

/// Selector bits saying what follows a packet's header.
const HAS_MATCHED_QUERY: u8 = 0x40;
const HAS_PRIOR: u8 = 0x80;

/// Where the sequence starts: 2025-01-01 12:00:00 UTC.
const START: Duration = Duration::from_secs(1_735_732_800);

const LINK_LAYERS: [LinkLayer; 4] = [
    LinkLayer::Ethernet,
    LinkLayer::RawIp,
    LinkLayer::LinuxSll,
    LinkLayer::LinuxSll2,
];

/// The bridge's MAC in the fuzzer's links: frames a pod sends to it enter the node.
const GATEWAY_MAC: [u8; 6] = [0x02, 0x42, 0x0a, 0xf4, 0x00, 0x01];

/// The node's links, as `LinkDescription` places their packets: pods on the bridge `cni0`,
/// watched at their ports (the first two) or at the bridge too (the third, as a capture of an
/// older dnsloop describes it), a pod on a routed veth, the uplink, and the loopbacks of the
/// node and of a pod.
fn links() -> Vec<LinkPoints> {
    let link = |role, namespace: Option<&str>, gateway| LinkDescription {
        role,
        namespace: namespace.map(Namespace::new),
        gateway,
    };
    let bridged = Role::Veth { bridged: true };
    let gateway = Some(GATEWAY_MAC);
    [
        (
            "veth-client",
            link(bridged, Some("pod 10.244.0.2"), gateway),
        ),
        (
            "veth-coredns-a",
            link(bridged, Some("pod 10.244.0.3"), gateway),
        ),
        (
            "veth-coredns-b",
            link(bridged, Some("pod 10.244.0.4"), None),
        ),
        ("cni0", link(Role::BridgeMaster, None, None)),
        ("eth0", link(Role::Other { bridged: false }, None, None)),
        ("lo", link(Role::Loopback, Some(NODE), None)),
        ("lo", link(Role::Loopback, Some("pod 10.244.0.3"), None)),
        (
            "cali-b",
            link(Role::Veth { bridged: false }, Some("pod 10.244.1.5"), None),
        ),
    ]
    .iter()
    .map(|(ifname, description)| description.points(ifname))
    .collect()
}

/// One packet of the input.
struct Packet<'a> {
    ts: SystemTime,
    point: usize,
    link_layer: LinkLayer,
    matched_query: Option<MatchedQuery>,
    prior: Option<PriorSighting>,
    bytes: &'a [u8],
}

/// The packets of `input`, in its format (see the module's documentation).
fn packets(mut input: &[u8]) -> impl Iterator<Item = Packet<'_>> {
    let mut clock = SystemTime::UNIX_EPOCH + START;
    std::iter::from_fn(move || {
        let input = &mut input;
        clock = shifted(clock, i16::from_le_bytes(take(input)?));
        let [selector] = take(input)?;
        let len = usize::from(u16::from_le_bytes(take(input)?));
        let matched_query = if selector & HAS_MATCHED_QUERY != 0 {
            Some(matched_query(input, clock)?)
        } else {
            None
        };
        let prior = if selector & HAS_PRIOR != 0 {
            Some(prior(input, clock)?)
        } else {
            None
        };
        let (bytes, rest) = input.split_at(len.min(input.len()));
        *input = rest;
        Some(Packet {
            ts: clock,
            point: usize::from(selector & 0x0f),
            link_layer: LINK_LAYERS[usize::from(selector >> 4) & 0x03],
            matched_query,
            prior,
            bytes,
        })
    })
}

/// The next `N` bytes of `input`, which then starts after them.
fn take<const N: usize>(input: &mut &[u8]) -> Option<[u8; N]> {
    let (bytes, rest) = input.split_first_chunk::<N>()?;
    *input = rest;
    Some(*bytes)
}

/// `at` moved `millis` later (earlier when negative), as far as the clock goes.
fn shifted(at: SystemTime, millis: i16) -> SystemTime {
    let step = Duration::from_millis(u64::from(millis.unsigned_abs()));
    if millis < 0 {
        at.checked_sub(step).unwrap_or(at)
    } else {
        at.checked_add(step).unwrap_or(at)
    }
}

/// The link of the `index`th pair of points.
fn link(index: usize) -> InterfaceRef {
    InterfaceRef {
        netns_cookie: 0,
        ifindex: u32::try_from(index).unwrap_or(u32::MAX),
    }
}

/// The point where a packet was `seen`.
fn point_of(links: &[LinkPoints], seen: Seen) -> Option<&Arc<Point>> {
    let link = links.get(usize::try_from(seen.interface.ifindex).ok()?)?;
    Some(link.get(seen.direction, seen.via_gateway))
}

fn direction(flags: u8) -> Direction {
    if flags & 1 != 0 {
        Direction::Egress
    } else {
        Direction::Ingress
    }
}

fn matched_query(input: &mut &[u8], packet_at: SystemTime) -> Option<MatchedQuery> {
    let before = i16::from_le_bytes(take(input)?);
    let [flags] = take(input)?;
    Some(MatchedQuery {
        at: shifted(packet_at, before.saturating_neg()),
        direction: direction(flags),
        via_gateway: flags & 2 != 0,
        server: take(input)?,
        server_port: u16::from_le_bytes(take(input)?),
    })
}

fn prior(input: &mut &[u8], packet_at: SystemTime) -> Option<PriorSighting> {
    let before = i16::from_le_bytes(take(input)?);
    let [flags] = take(input)?;
    let family = if flags & 4 != 0 {
        IpFamily::V6
    } else {
        IpFamily::V4
    };
    let mut addr = || -> Option<std::net::SocketAddr> {
        let ip = take(input)?;
        Some(socket_addr(family, &ip, u16::from_le_bytes(take(input)?)))
    };
    let src = addr()?;
    let dst = addr()?;
    Some(PriorSighting {
        at: shifted(packet_at, before.saturating_neg()),
        seen: Seen {
            interface: link(usize::from(flags >> 3) & 0x07),
            direction: direction(flags),
            via_gateway: flags & 0x40 != 0,
        },
        src,
        dst,
        id: u16::from_le_bytes(take(input)?),
        tcp: flags & 2 != 0,
    })
}

/// Runs the packets of `input` through the decoder, the analyzers and both sinks, with every
/// packet printed (`--packets`), and checks what was written.
///
/// # Panics
///
/// When the pipeline fails, or writes a text line with a control character or a JSON line that
/// is not a record of the schema, written as the schema writes it: that is what the fuzzer
/// looks for.
pub fn decode_packets(input: &[u8]) {
    let text = run(input, OutputFormat::Text);
    let text = std::str::from_utf8(&text).expect("the text sink writes UTF-8");
    if let Some(line) = text
        .split('\n')
        .find(|line| line.chars().any(char::is_control))
    {
        panic!("a control character reached the text output: {line:?}");
    }
    let json = run(input, OutputFormat::Json);
    for line in json
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
    {
        let line = std::str::from_utf8(line).expect("the JSON sink writes UTF-8");
        let record: Record =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
        let again = serde_json::to_string(&record).expect("a record serializes");
        assert_eq!(again, line, "not written as the schema writes it");
    }
}

/// What the pipeline writes in `format` for the packets of `input`.
fn run(input: &[u8], format: OutputFormat) -> Vec<u8> {
    let links = links();
    let mut out = Vec::new();
    let mut pipeline = Pipeline::without_enrichment(
        Decoder::new(DnsPorts::new(&[53]), Coverage::EveryPacket),
        Engine::new(EngineConfig::default()),
        sink::for_format(
            format,
            &sink::NodeName::new("fuzz-node"),
            &Names::AsSent,
            &mut out,
        ),
        true,
    );
    let mut end = SystemTime::UNIX_EPOCH + START;
    for packet in packets(input) {
        let points = &links[packet.point / 2];
        let direction = direction(packet.point as u8);
        let raw = RawPacket {
            ts: packet.ts,
            seen: Seen {
                interface: link(packet.point / 2),
                direction,
                via_gateway: points.via_gateway(direction, packet.bytes),
            },
            link_layer: packet.link_layer,
            bytes: bytes::Bytes::copy_from_slice(packet.bytes),
            matched_query: packet.matched_query,
            priors: packet.prior.into_iter().collect(),
            recorder_only: false,
        };
        let ingested = pipeline
            .ingest_placed(&raw, |seen| point_of(&links, seen))
            .and_then(|_| pipeline.tick(packet.ts));
        ingested.expect("writing to memory does not fail");
        end = end.max(packet.ts);
    }
    pipeline
        .finish(end, None, |unplaced, _| {
            SummarySource::CaptureFile(CaptureFileSummary {
                packets: CapturePackets {
                    unplaced,
                    ..CapturePackets::default()
                },
                ..CaptureFileSummary::default()
            })
        })
        .expect("writing to memory does not fail");
    out
}

#[cfg(test)]
mod tests;
