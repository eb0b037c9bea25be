//! The packet and DNS parser, shared by the kernel programs and userspace.
//!
//! [`classify`] walks link layer → IP → UDP/TCP and yields the [`Segment`] of a DNS packet;
//! [`udp_message`] / [`tcp_framing`] locate its DNS messages; [`parse_dns`] reads the header and
//! first question of one message from a fixed buffer.
//!
//! Everything here also runs inside BPF programs, so the code is written for the verifier:
//! no allocation, recursion or panic paths (variable indices go through `get` or a masked
//! helper; constant indices only into fixed-size arrays, which rustc checks at compile time),
//! every loop has a small constant bound, and big buffers are passed by reference.

mod bytes;
mod class;
mod dns;
mod encapsulation;
mod fragment;
mod framing;
mod icmp;
mod ip;
mod link;
mod message;
mod name_hash;
mod probe;
mod transport;

pub use bytes::{PacketBytes, SlicePacket};
pub use class::{Malformed, PacketClass, Skip};
pub use dns::{
    parse_dns, parse_dns_with, ByteWalk, DnsHeader, DnsSummary, NameWalk, NameWalker, PlainWalk,
    Question, MAX_NAME_LABEL_STEPS,
};
pub use encapsulation::{encapsulated_frame, Encapsulated, Encapsulation};
pub use fragment::{ip_fragment, IpFragment};
pub use framing::{tcp_framing, udp_message, DnsMessageRef, TcpFraming, MAX_TCP_MESSAGES};
pub use icmp::Unreachable;
pub use ip::IpFamily;
pub use link::LinkLayer;
pub use message::{Message, DNS_BUF_LEN};
pub use name_hash::{name_hash, name_hash_fold, NAME_HASH_SEED};
pub use probe::Probe;
pub use transport::{
    tcp_position, DnsPorts, TcpPosition, TooManyDnsPorts, Transport, MAX_DNS_PORTS,
};

use class::Rejected;
use link::NetworkStart;

/// A UDP or TCP segment on a DNS port, and where its payload is. Offsets are absolute, from
/// the start of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub l3_offset: usize,
    pub family: IpFamily,
    /// IPv4 addresses take the first 4 bytes; the rest is zero.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub transport: Transport,
    /// Absolute offset of the UDP or TCP header.
    pub l4_offset: usize,
    pub payload_offset: usize,
    /// Payload bytes the packet holds: `declared_payload_len` clamped to the packet's end.
    pub payload_len: usize,
    /// Payload bytes the IP/UDP length fields declare. Above `payload_len` when the packet was
    /// cut short: a capture snaplen, or a first fragment (the rest is in later fragments).
    pub declared_payload_len: usize,
}

/// Decides whether a packet is DNS over UDP/TCP on one of `ports`, and if so where it is.
#[inline(always)]
pub fn classify<P: PacketBytes>(pkt: &P, link: LinkLayer, ports: &DnsPorts) -> PacketClass {
    match dns_segment(pkt, link, ports) {
        Ok(segment) => PacketClass::Dns(segment),
        Err(Rejected::Icmp { family, offset })
            if icmp::refuses_dns_reply(pkt, family, offset, ports) =>
        {
            PacketClass::DnsPortUnreachable
        }
        Err(rejected) => rejected.into(),
    }
}

/// A DNS query sent back as undeliverable in an ICMP destination unreachable, as the ICMP
/// quotes it: nothing listened on its port, or no neighbour answered for its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusedQuery {
    pub why: Unreachable,
    /// The ICMP message's sender, the host that refused it (IPv4 in the first 4 bytes).
    pub refused_by: [u8; 16],
    /// The query's datagram as sent; its payload is as much of the query as the ICMP quotes.
    pub query: Segment,
}

/// The UDP query to one of `ports` that an ICMP port or host unreachable in `pkt` sends back;
/// `None` for any other packet. The kernel programs see these as drops (`NO_SOCKET`,
/// `NEIGH_FAILED`); a capture shows them only this way.
pub fn refused_query<P: PacketBytes>(
    pkt: &P,
    link: LinkLayer,
    ports: &DnsPorts,
) -> Option<RefusedQuery> {
    let (sender, family, offset) = icmp_error(pkt, link)?;
    let (why, quoted) = icmp::unreachable_quote(pkt, family, offset)?;
    let (query, _) = quoted_udp(pkt, quoted, ports)?;
    ports.contains(query.dport).then_some(RefusedQuery {
        why,
        refused_by: sender,
        query,
    })
}

/// A DNS reply whose fragments a host gave up reassembling, as the ICMP "fragment reassembly
/// time exceeded" it sent back quotes the reply's first fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbandonedReply {
    /// The ICMP message's sender, the host that held the first fragment (IPv4 in the first 4
    /// bytes).
    pub abandoned_by: [u8; 16],
    /// The reply's first fragment as sent; its payload is as much of the reply as the ICMP
    /// quotes, its declared length the whole reply's.
    pub reply: Segment,
    /// The first fragment's size on the wire, IP header included, as its header declares it.
    pub fragment_len: usize,
}

/// The UDP reply from one of `ports` whose reassembly an ICMP "fragment reassembly time
/// exceeded" in `pkt` says its sender gave up; `None` for any other packet. The kernel
/// programs see these as drops (`FRAG_REASM_TIMEOUT`); a capture shows them only this way.
/// Userspace only.
pub fn abandoned_reply<P: PacketBytes>(
    pkt: &P,
    link: LinkLayer,
    ports: &DnsPorts,
) -> Option<AbandonedReply> {
    let (sender, family, offset) = icmp_error(pkt, link)?;
    let quoted = icmp::reassembly_timeout_quote(pkt, family, offset)?;
    let (reply, end) = quoted_udp(pkt, quoted, ports)?;
    // A reply, fragmented: its UDP length runs past the fragment that carries its header.
    let fragmented = reply.payload_offset + reply.declared_payload_len > end;
    (ports.contains(reply.sport) && fragmented).then_some(AbandonedReply {
        abandoned_by: sender,
        reply,
        fragment_len: end - quoted.offset,
    })
}

/// The sender of the ICMP message in `pkt` (IPv4 in the first 4 bytes), its family and where
/// the message starts; `None` for a packet that is not ICMP.
fn icmp_error<P: PacketBytes>(pkt: &P, link: LinkLayer) -> Option<([u8; 16], IpFamily, usize)> {
    let network = link::network_start(pkt, link).ok()?;
    let Err(Rejected::Icmp { family, offset }) = ip::parse_ip(pkt, network) else {
        return None;
    };
    let (sender, _) = ip::addresses(pkt, network);
    Some((sender, family, offset))
}

/// The UDP datagram on one of `ports` an ICMP error quotes at `quoted`, and where the datagram
/// ends as its IP header declares it.
fn quoted_udp<P: PacketBytes>(
    pkt: &P,
    quoted: NetworkStart,
    ports: &DnsPorts,
) -> Option<(Segment, usize)> {
    let datagram = ip::parse_ip(pkt, quoted).ok()?;
    if datagram.transport != Transport::Udp {
        return None;
    }
    let payload = transport::parse_transport(pkt, &datagram, ports).ok()?;
    let (src, dst) = ip::addresses(pkt, quoted);
    let segment = Segment {
        l3_offset: quoted.offset,
        family: quoted.family,
        src,
        dst,
        sport: payload.sport,
        dport: payload.dport,
        transport: Transport::Udp,
        l4_offset: datagram.l4_offset,
        payload_offset: payload.offset,
        payload_len: payload.len,
        declared_payload_len: payload.declared_len,
    };
    Some((segment, datagram.end))
}

/// The IP protocol (IPv6: the first next header) of the packet at `link`; `None` when its
/// link or IP header does not parse. Userspace only: a cheap look before a full `classify`.
pub fn ip_protocol<P: PacketBytes>(pkt: &P, link: LinkLayer) -> Option<u8> {
    let network = link::network_start(pkt, link).ok()?;
    let offset = match network.family {
        IpFamily::V4 => IPV4_PROTOCOL_OFFSET,
        IpFamily::V6 => IPV6_NEXT_HEADER_OFFSET,
    };
    let [protocol] = pkt.read::<1>(network.offset + offset)?;
    Some(protocol)
}

const IPV4_PROTOCOL_OFFSET: usize = 9;
const IPV6_NEXT_HEADER_OFFSET: usize = 6;

#[inline(always)]
fn dns_segment<P: PacketBytes>(
    pkt: &P,
    link: LinkLayer,
    ports: &DnsPorts,
) -> Result<Segment, Rejected> {
    let network = link::network_start(pkt, link)?;
    let datagram = ip::parse_ip(pkt, network)?;
    let payload = transport::parse_transport(pkt, &datagram, ports)?;
    let (src, dst) = ip::addresses(pkt, network);
    Ok(Segment {
        l3_offset: network.offset,
        family: network.family,
        src,
        dst,
        sport: payload.sport,
        dport: payload.dport,
        transport: datagram.transport,
        l4_offset: datagram.l4_offset,
        payload_offset: payload.offset,
        payload_len: payload.len,
        declared_payload_len: payload.declared_len,
    })
}
