//! The userspace decode path under the fuzzer: packet bytes -> decoder -> analyzers -> the
//! text and JSON sinks, as `analyze` runs it (`cargo xtask fuzz`, target `decode_packets`).
//!
//! The input is a sequence of packets, each seen at one of the observation points of a node
//! like the lab's, so that the analyzers see queries and their answers, forwards and loops:
//!
//! ```text
//! per packet: i16 LE   milliseconds since the previous packet (negative: out of order)
//!             u8       low 4 bits: the point (`POINTS`, ingress then egress of each link);
//!                      bits 4-5: the link layer (Ethernet, raw IP, Linux SLL, Linux SLL2)
//!             u16 LE   the frame's length (cut to the bytes left)
//!             bytes    the frame
//! ```
//!
//! An input that ends inside a header ends the sequence. Built with the `fuzzing` feature and in
//! this crate's tests, which write the seed corpus and hold a regression test of every crash
//! the fuzzer found.
use std::time::{Duration, SystemTime};

use dnsloop_ebpf::parse::LinkLayer;
use serde_json::json;

use crate::{
    analyze::{Engine, EngineConfig},
    cli::OutputFormat,
    decode::Decoder,
    observation::{Namespace, Point},
    pipeline::Pipeline,
    points::{LinkDescription, Role, NODE},
    sink,
    source::{InterfaceRef, RawPacket},
};

/// Bytes of a packet's header in the input.
const HEADER_LEN: usize = 5;

/// Where the sequence starts: 2025-01-01 12:00:00 UTC.
const START: Duration = Duration::from_secs(1_735_732_800);

const LINK_LAYERS: [LinkLayer; 4] = [
    LinkLayer::Ethernet,
    LinkLayer::RawIp,
    LinkLayer::LinuxSll,
    LinkLayer::LinuxSll2,
];

/// The node's links, as `LinkDescription` places their packets: pods on the bridge `cni0`,
/// a pod on a routed veth, the uplink, and the loopbacks of the node and of a pod.
fn points() -> Vec<Point> {
    let link = |role, namespace: Option<&str>| LinkDescription {
        role,
        namespace: namespace.map(Namespace::new),
    };
    let bridged = Role::Veth { bridged: true };
    [
        ("veth-client", link(bridged, Some("pod 10.244.0.2"))),
        ("veth-coredns-a", link(bridged, Some("pod 10.244.0.3"))),
        ("veth-coredns-b", link(bridged, Some("pod 10.244.0.4"))),
        ("cni0", link(Role::BridgeMaster, None)),
        ("eth0", link(Role::Other { bridged: false }, None)),
        ("lo", link(Role::Loopback, Some(NODE))),
        ("lo", link(Role::Loopback, Some("pod 10.244.0.3"))),
        (
            "cali-b",
            link(Role::Veth { bridged: false }, Some("pod 10.244.1.5")),
        ),
    ]
    .iter()
    .flat_map(|(ifname, description)| description.points(ifname))
    .collect()
}

/// One packet of the input.
struct Packet<'a> {
    ts: SystemTime,
    point: usize,
    link_layer: LinkLayer,
    bytes: &'a [u8],
}

/// The packets of `input`, in its format (see the module's documentation).
fn packets(mut input: &[u8]) -> impl Iterator<Item = Packet<'_>> {
    let mut clock = SystemTime::UNIX_EPOCH + START;
    std::iter::from_fn(move || {
        let (header, rest) = input.split_first_chunk::<HEADER_LEN>()?;
        let [delta_lo, delta_hi, selector, len_lo, len_hi] = *header;
        let delta = i16::from_le_bytes([delta_lo, delta_hi]);
        let step = Duration::from_millis(u64::from(delta.unsigned_abs()));
        clock = if delta < 0 {
            clock.checked_sub(step).unwrap_or(clock)
        } else {
            clock + step
        };
        let len = usize::from(u16::from_le_bytes([len_lo, len_hi])).min(rest.len());
        let (bytes, rest) = rest.split_at(len);
        input = rest;
        Some(Packet {
            ts: clock,
            point: usize::from(selector & 0x0f),
            link_layer: LINK_LAYERS[usize::from(selector >> 4) & 0x03],
            bytes,
        })
    })
}

/// Runs the packets of `input` through the decoder, the analyzers and both sinks, with every
/// packet printed (`--packets`), and checks what was written.
///
/// # Panics
///
/// When the pipeline fails, or writes a text line with a control character or a JSON line that
/// is not a JSON object: that is what the fuzzer looks for.
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
        let value: serde_json::Value = serde_json::from_slice(line)
            .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(line)));
        assert!(value.is_object(), "not a JSON object: {value}");
    }
}

/// What the pipeline writes in `format` for the packets of `input`.
fn run(input: &[u8], format: OutputFormat) -> Vec<u8> {
    let points = points();
    let mut out = Vec::new();
    let mut pipeline = Pipeline::without_enrichment(
        Decoder::new(&[53]),
        Engine::new(EngineConfig::default()),
        sink::for_format(format, &mut out),
        true,
    );
    let mut end = SystemTime::UNIX_EPOCH + START;
    for packet in packets(input) {
        let point = &points[packet.point];
        let raw = RawPacket {
            ts: packet.ts,
            interface: InterfaceRef {
                netns_cookie: 0,
                ifindex: u32::try_from(packet.point).unwrap_or(u32::MAX),
            },
            direction: point.direction,
            link_layer: packet.link_layer,
            bytes: bytes::Bytes::copy_from_slice(packet.bytes),
            matched_query: None,
            priors: Vec::new(),
        };
        let ingested = pipeline
            .ingest_placed(&raw, point)
            .and_then(|_| pipeline.tick(packet.ts));
        ingested.expect("writing to memory does not fail");
        end = end.max(packet.ts);
    }
    pipeline
        .finish(end, None, |unplaced| json!({ "unplaced": unplaced }))
        .expect("writing to memory does not fail");
    out
}

#[cfg(test)]
mod tests;
