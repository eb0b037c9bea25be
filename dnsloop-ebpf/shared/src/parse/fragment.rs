//! IP fragments, as a reassembler needs them. Userspace only: `analyze` reassembles the
//! fragmented datagrams of a capture, while the kernel programs see first fragments alone.

use super::bytes::{read_header, PacketBytes};
use super::ip::{
    self, IpFamily, DESTINATION_OPTIONS, FRAGMENT, FRAGMENT_HEADER_LEN, HOP_BY_HOP,
    IPV4_FRAGMENT_OFFSET_MASK, IPV4_HEADER_LEN, IPV6_HEADER_LEN, MAX_EXTENSION_HEADERS, ROUTING,
};
use super::link::{self, LinkLayer};

/// One fragment of an IPv4 or IPv6 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpFragment {
    pub family: IpFamily,
    /// IPv4 addresses take the first 4 bytes; the rest is zero.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// The datagram's identification: 16 bits in IPv4, 32 in IPv6.
    pub id: u32,
    /// The IP protocol of the datagram's payload (IPv6: the fragment header's next header).
    pub protocol: u8,
    /// Where this fragment's data lies in the datagram's payload, in bytes.
    pub offset: usize,
    /// More fragments follow this one.
    pub more: bool,
    /// Absolute offset of the fragment's data in the packet.
    pub data_offset: usize,
    /// Data bytes the packet holds: `declared_len` clamped to the packet's end.
    pub data_len: usize,
    /// Data bytes the IP length field declares.
    pub declared_len: usize,
}

const IPV4_MORE_FRAGMENTS: u16 = 0x2000;

/// The fragment `pkt` holds, if it is one (a first, middle or last fragment); `None` for a
/// whole datagram or a packet whose headers do not parse.
pub fn ip_fragment<P: PacketBytes>(pkt: &P, link: LinkLayer) -> Option<IpFragment> {
    let start = link::network_start(pkt, link).ok()?;
    let (src, dst) = ip::addresses(pkt, start);
    match start.family {
        IpFamily::V4 => {
            let header = pkt.read::<IPV4_HEADER_LEN>(start.offset)?;
            let header_len = usize::from(header[0] & 0x0f) * 4;
            let total_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
            let flags = u16::from_be_bytes([header[6], header[7]]);
            let offset = usize::from(flags & IPV4_FRAGMENT_OFFSET_MASK) * 8;
            let more = flags & IPV4_MORE_FRAGMENTS != 0;
            if header[0] >> 4 != 4 || header_len < IPV4_HEADER_LEN || total_len < header_len {
                return None;
            }
            if offset == 0 && !more {
                return None;
            }
            Some(fragment(
                pkt,
                (IpFamily::V4, src, dst),
                u32::from(u16::from_be_bytes([header[4], header[5]])),
                header[9],
                (offset, more),
                start.offset + header_len,
                start.offset + total_len,
            ))
        }
        IpFamily::V6 => {
            let header = pkt.read::<IPV6_HEADER_LEN>(start.offset)?;
            let payload_start = start.offset + IPV6_HEADER_LEN;
            let end = payload_start + usize::from(u16::from_be_bytes([header[4], header[5]]));
            let mut next_header = header[6];
            let mut cursor = payload_start;
            for _ in 0..MAX_EXTENSION_HEADERS {
                match next_header {
                    HOP_BY_HOP | ROUTING | DESTINATION_OPTIONS => {
                        let [next, len] =
                            read_header(pkt, cursor, end, super::Malformed::TruncatedIpv6).ok()?;
                        next_header = next;
                        cursor += (usize::from(len) + 1) * 8;
                    }
                    FRAGMENT => {
                        let fields: [u8; FRAGMENT_HEADER_LEN] =
                            read_header(pkt, cursor, end, super::Malformed::TruncatedIpv6).ok()?;
                        let [next, _, offset_hi, offset_lo, id @ ..] = fields;
                        let offset_and_more = u16::from_be_bytes([offset_hi, offset_lo]);
                        let offset = usize::from(offset_and_more >> 3) * 8;
                        let more = offset_and_more & 1 != 0;
                        // An atomic fragment (RFC 6946) is a whole datagram.
                        if offset == 0 && !more {
                            return None;
                        }
                        return Some(fragment(
                            pkt,
                            (IpFamily::V6, src, dst),
                            u32::from_be_bytes(id),
                            next,
                            (offset, more),
                            cursor + FRAGMENT_HEADER_LEN,
                            end,
                        ));
                    }
                    _ => return None,
                }
            }
            None
        }
    }
}

/// The fragment whose data runs from `data_offset` to `end` (as declared) in `pkt`.
fn fragment<P: PacketBytes>(
    pkt: &P,
    (family, src, dst): (IpFamily, [u8; 16], [u8; 16]),
    id: u32,
    protocol: u8,
    (offset, more): (usize, bool),
    data_offset: usize,
    end: usize,
) -> IpFragment {
    let declared_len = end.saturating_sub(data_offset);
    IpFragment {
        family,
        src,
        dst,
        id,
        protocol,
        offset,
        more,
        data_offset,
        data_len: declared_len.min(pkt.len().saturating_sub(data_offset)),
        declared_len,
    }
}
