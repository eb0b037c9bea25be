//! Network layer: IPv4 and IPv6 (with its extension header chain) up to the transport header.

use super::bytes::{read_header, PacketBytes};
use super::class::{Malformed, Rejected, Skip};
use super::link::NetworkStart;
use super::transport::Transport;

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4 = 4,
    V6 = 6,
}

/// The parts of an IP datagram the transport layer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Datagram {
    pub transport: Transport,
    /// Absolute offset of the transport header.
    pub l4_offset: usize,
    /// Absolute offset just past the datagram as its length field declares it; may lie beyond
    /// the end of the packet (capture snaplen, first fragment of a larger datagram).
    pub end: usize,
}

pub(super) const IPV4_HEADER_LEN: usize = 20;
/// Where the source address starts; the destination follows it, in both families.
const IPV4_ADDRESSES_OFFSET: usize = 12;
const IPV6_ADDRESSES_OFFSET: usize = 8;
const IPV4_MIN_IHL: u8 = 5;
pub(super) const IPV4_FRAGMENT_OFFSET_MASK: u16 = 0x1fff;

pub(super) const IPV6_HEADER_LEN: usize = 40;
/// Real traffic carries one or two; six covers every legitimate chain (RFC 8200 4.1 order).
pub(super) const MAX_EXTENSION_HEADERS: usize = 6;

pub(super) const HOP_BY_HOP: u8 = 0;
pub(super) const ROUTING: u8 = 43;
pub(super) const FRAGMENT: u8 = 44;
const AUTHENTICATION: u8 = 51;
pub(super) const DESTINATION_OPTIONS: u8 = 60;
pub(super) const FRAGMENT_HEADER_LEN: usize = 8;

/// Parses the IP header the link layer pointed at.
#[inline(always)]
pub(crate) fn parse_ip<P: PacketBytes>(pkt: &P, start: NetworkStart) -> Result<Datagram, Rejected> {
    match start.family {
        IpFamily::V4 => parse_ipv4(pkt, start.offset),
        IpFamily::V6 => parse_ipv6(pkt, start.offset),
    }
}

/// The end of a datagram whose length field (counted from `counted_from`) is `declared`.
///
/// Linux BIG TCP (6.3+) leaves the length field zero on aggregates over 64 KiB (IPv6 payload
/// length also means "jumbogram" when zero); such a datagram runs to the end of the packet.
#[inline(always)]
fn datagram_end<P: PacketBytes>(pkt: &P, counted_from: usize, declared: u16) -> usize {
    if declared == 0 {
        pkt.len()
    } else {
        counted_from + usize::from(declared)
    }
}

#[inline(always)]
fn parse_ipv4<P: PacketBytes>(pkt: &P, offset: usize) -> Result<Datagram, Rejected> {
    let header = pkt
        .read::<IPV4_HEADER_LEN>(offset)
        .ok_or(Malformed::TruncatedIpv4)?;
    if header[0] >> 4 != 4 {
        return Err(Malformed::BadIpVersion.into());
    }
    let ihl = header[0] & 0x0f;
    if ihl < IPV4_MIN_IHL {
        return Err(Malformed::BadIhl.into());
    }
    let header_len = usize::from(ihl) * 4;
    // Options are skipped, not read, but must be in the packet for the transport header to be.
    if offset + header_len > pkt.len() {
        return Err(Malformed::TruncatedIpv4.into());
    }
    let total_len = u16::from_be_bytes([header[2], header[3]]);
    if total_len != 0 && usize::from(total_len) < header_len {
        return Err(Malformed::BadIpLength.into());
    }
    // In both families a non-first fragment is reported before the protocol: in IPv6 the
    // protocol can only be learnt by walking past the fragment header.
    if u16::from_be_bytes([header[6], header[7]]) & IPV4_FRAGMENT_OFFSET_MASK != 0 {
        return Err(Skip::NonFirstFragment.into());
    }
    let transport = transport_of(header[9], IpFamily::V4, offset + header_len)?;
    Ok(Datagram {
        transport,
        l4_offset: offset + header_len,
        end: datagram_end(pkt, offset, total_len),
    })
}

#[inline(always)]
fn parse_ipv6<P: PacketBytes>(pkt: &P, offset: usize) -> Result<Datagram, Rejected> {
    let header = pkt
        .read::<IPV6_HEADER_LEN>(offset)
        .ok_or(Malformed::TruncatedIpv6)?;
    if header[0] >> 4 != 6 {
        return Err(Malformed::BadIpVersion.into());
    }
    let payload_start = offset + IPV6_HEADER_LEN;
    let end = datagram_end(
        pkt,
        payload_start,
        u16::from_be_bytes([header[4], header[5]]),
    );
    let mut next_header = header[6];
    let mut cursor = payload_start;
    // One flat, bounded walk: the verifier rejects loops it cannot bound.
    for _ in 0..MAX_EXTENSION_HEADERS {
        match next_header {
            HOP_BY_HOP | ROUTING | DESTINATION_OPTIONS => {
                let [next, len] = read_header(pkt, cursor, end, Malformed::TruncatedIpv6)?;
                next_header = next;
                // Length in 8-octet units, not counting the first 8 octets.
                cursor += (usize::from(len) + 1) * 8;
            }
            AUTHENTICATION => {
                let [next, len] = read_header(pkt, cursor, end, Malformed::TruncatedIpv6)?;
                next_header = next;
                // RFC 4302: length in 4-octet units, minus 2.
                cursor += (usize::from(len) + 2) * 4;
            }
            FRAGMENT => {
                let [next, _, offset_hi, offset_lo] =
                    read_header(pkt, cursor, end, Malformed::TruncatedIpv6)?;
                // The 13-bit offset sits above 2 reserved bits and the M flag.
                if u16::from_be_bytes([offset_hi, offset_lo]) >> 3 != 0 {
                    return Err(Skip::NonFirstFragment.into());
                }
                next_header = next;
                cursor += FRAGMENT_HEADER_LEN;
            }
            _ => break,
        }
    }
    if matches!(
        next_header,
        HOP_BY_HOP | ROUTING | FRAGMENT | AUTHENTICATION | DESTINATION_OPTIONS
    ) {
        return Err(Malformed::TooManyExtensionHeaders.into());
    }
    let transport = transport_of(next_header, IpFamily::V6, cursor)?;
    Ok(Datagram {
        transport,
        l4_offset: cursor,
        end,
    })
}

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_ICMPV6: u8 = 58;

/// The transport of IP protocol `protocol`, whose header is at `offset`: UDP or TCP; ICMP of the
/// datagram's own family goes back to `classify` to be looked into.
#[inline(always)]
fn transport_of(protocol: u8, family: IpFamily, offset: usize) -> Result<Transport, Rejected> {
    if let Some(transport) = Transport::from_protocol(protocol) {
        return Ok(transport);
    }
    let icmp = match family {
        IpFamily::V4 => IPPROTO_ICMP,
        IpFamily::V6 => IPPROTO_ICMPV6,
    };
    if protocol == icmp {
        Err(Rejected::Icmp { family, offset })
    } else {
        Err(Skip::NotUdpOrTcp.into())
    }
}

/// The source and destination addresses of the IP header at `start`, each in a 16-byte slot
/// (IPv4 leaves the tail zero). Read only once the packet is known to be DNS: nearly every
/// packet is not, and copying its addresses cost each one about 5 % of its run.
///
/// The header was read whole before, so the read cannot fail; its failure is not a separate
/// outcome (which would double what the verifier of Linux 6.1 walks), only zero addresses.
#[inline(always)]
pub(crate) fn addresses<P: PacketBytes>(pkt: &P, start: NetworkStart) -> ([u8; 16], [u8; 16]) {
    match start.family {
        IpFamily::V4 => {
            let both = pkt
                .read::<8>(start.offset + IPV4_ADDRESSES_OFFSET)
                .unwrap_or_default();
            (address_slot(&both, 0, 4), address_slot(&both, 4, 4))
        }
        IpFamily::V6 => {
            let both = pkt
                .read::<32>(start.offset + IPV6_ADDRESSES_OFFSET)
                .unwrap_or([0; 32]);
            (address_slot(&both, 0, 16), address_slot(&both, 16, 16))
        }
    }
}

/// Copies the `len`-byte address at `start` of `header` into a 16-byte slot (IPv4 leaves the tail
/// zero). Iterators instead of slice ranges keep the code free of panic paths by construction.
#[inline(always)]
fn address_slot(header: &[u8], start: usize, len: usize) -> [u8; 16] {
    let mut slot = [0; 16];
    for (to, from) in slot.iter_mut().zip(header.iter().skip(start).take(len)) {
        *to = *from;
    }
    slot
}
