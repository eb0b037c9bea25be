//! The full parse pipeline, shared by the parser's tests, with the frame builders they are fed
//! (dnsloop-frames', shared with userspace's tests of the kernel programs).

pub use dnsloop_frames::*;
use dnsloop_shared::parse::{
    classify, parse_dns, tcp_framing, udp_message, DnsMessageRef, DnsPorts, DnsSummary, LinkLayer,
    Malformed, PacketClass, Segment, Skip, SlicePacket, Transport, DNS_BUF_LEN,
};

pub const ALL_LINKS: [LinkLayer; 4] = [
    LinkLayer::Ethernet,
    LinkLayer::RawIp,
    LinkLayer::LinuxSll,
    LinkLayer::LinuxSll2,
];

pub fn dns_ports() -> DnsPorts {
    DnsPorts::new(&[53])
}

pub fn classify_frame(frame: &[u8], link: LinkLayer) -> PacketClass {
    classify(&SlicePacket(frame), link, &dns_ports())
}

pub fn segment_of(frame: &[u8], link: LinkLayer) -> Segment {
    match classify_frame(frame, link) {
        PacketClass::Dns(segment) => segment,
        other => panic!("expected a DNS segment, got {other:?}"),
    }
}

/// Copies a message into a DNS buffer the way the BPF side does: `load_len` bytes from its
/// offset.
pub fn load_message(
    frame: &[u8],
    segment: &Segment,
    msg: &DnsMessageRef,
) -> ([u8; DNS_BUF_LEN], usize) {
    let len = msg.load_len(segment);
    let mut buf = [0; DNS_BUF_LEN];
    buf[..len].copy_from_slice(&frame[msg.offset..msg.offset + len]);
    (buf, len)
}

/// The messages of a DNS segment and what `parse_dns` makes of each.
pub fn parse_messages(
    frame: &[u8],
    segment: &Segment,
) -> Vec<(DnsMessageRef, Result<DnsSummary, Malformed>)> {
    let messages: Vec<DnsMessageRef> = match segment.transport {
        Transport::Udp => vec![udp_message(segment)],
        Transport::Tcp => tcp_framing(&SlicePacket(frame), segment)
            .messages()
            .copied()
            .collect(),
    };
    messages
        .into_iter()
        .map(|msg| {
            let (buf, len) = load_message(frame, segment, &msg);
            (msg, parse_dns(&buf, len))
        })
        .collect()
}

/// Parses the only DNS message of a frame built from `spec`.
pub fn parse_single(spec: &FrameSpec) -> Result<DnsSummary, Malformed> {
    let frame = spec.build();
    let segment = segment_of(&frame, spec.link);
    let mut results = parse_messages(&frame, &segment);
    assert_eq!(results.len(), 1, "one message expected");
    results.remove(0).1
}

/// Parses a bare DNS message (no packet around it).
pub fn parse_bytes(msg: &[u8]) -> Result<DnsSummary, Malformed> {
    let mut buf = [0; DNS_BUF_LEN];
    let len = msg.len().min(DNS_BUF_LEN);
    buf[..len].copy_from_slice(&msg[..len]);
    parse_dns(&buf, len)
}

/// Why `classify` skipped `frame`; fails the test if it did anything else.
pub fn skipped(frame: &[u8], link: LinkLayer) -> Skip {
    match classify_frame(frame, link) {
        PacketClass::Skip(reason) => reason,
        other => panic!("expected Skip, got {other:?}"),
    }
}
