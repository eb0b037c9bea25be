//! ICMP errors about DNS: a client whose socket refused a reply (a reply from an unexpected
//! source, for one) answers with a port unreachable quoting that reply; a host where nothing
//! listens on a DNS port answers a query with one quoting the query; a host that gave up
//! reassembling a fragmented reply answers with a time exceeded quoting its first fragment.

use super::bytes::{read_u16, PacketBytes};
use super::ip::IpFamily;
use super::link::NetworkStart;
use super::transport::DnsPorts;

const ICMPV4_DEST_UNREACHABLE: u8 = 3;
const ICMPV4_HOST_UNREACHABLE: u8 = 1;
const ICMPV4_PORT_UNREACHABLE: u8 = 3;
const ICMPV6_DEST_UNREACHABLE: u8 = 1;
const ICMPV6_ADDRESS_UNREACHABLE: u8 = 3;
const ICMPV6_PORT_UNREACHABLE: u8 = 4;
const ICMPV4_TIME_EXCEEDED: u8 = 11;
const ICMPV6_TIME_EXCEEDED: u8 = 3;
/// The same code in both families: "fragment reassembly time exceeded".
const FRAGMENT_REASSEMBLY_TIME_EXCEEDED: u8 = 1;
/// Type, code, checksum and 4 unused bytes precede the quoted datagram.
const ICMP_HEADER_LEN: usize = 8;
const IPPROTO_UDP: u8 = 17;
const IPV6_HEADER_LEN: usize = 40;

/// Whether the ICMP message at `offset` is a port unreachable.
#[inline(always)]
fn is_port_unreachable<P: PacketBytes>(pkt: &P, family: IpFamily, offset: usize) -> bool {
    let Some([kind, code]) = pkt.read::<2>(offset) else {
        return false;
    };
    match family {
        IpFamily::V4 => kind == ICMPV4_DEST_UNREACHABLE && code == ICMPV4_PORT_UNREACHABLE,
        IpFamily::V6 => kind == ICMPV6_DEST_UNREACHABLE && code == ICMPV6_PORT_UNREACHABLE,
    }
}

/// Why a host sent back a datagram it could not deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// Nothing listens on the port it was sent to.
    Port,
    /// No neighbour answered for its destination (ARP or neighbour discovery failed).
    Host,
}

/// Why the ICMP message at `offset` says a datagram could not be delivered, and where the
/// datagram it quotes starts; `None` for any other message.
pub(crate) fn unreachable_quote<P: PacketBytes>(
    pkt: &P,
    family: IpFamily,
    offset: usize,
) -> Option<(Unreachable, NetworkStart)> {
    let [kind, code] = pkt.read::<2>(offset)?;
    let unreachable = match (family, kind, code) {
        (IpFamily::V4, ICMPV4_DEST_UNREACHABLE, ICMPV4_PORT_UNREACHABLE)
        | (IpFamily::V6, ICMPV6_DEST_UNREACHABLE, ICMPV6_PORT_UNREACHABLE) => Unreachable::Port,
        (IpFamily::V4, ICMPV4_DEST_UNREACHABLE, ICMPV4_HOST_UNREACHABLE)
        | (IpFamily::V6, ICMPV6_DEST_UNREACHABLE, ICMPV6_ADDRESS_UNREACHABLE) => Unreachable::Host,
        _ => return None,
    };
    let quoted = NetworkStart {
        offset: offset + ICMP_HEADER_LEN,
        family,
    };
    Some((unreachable, quoted))
}

/// Where the datagram quoted by the ICMP message at `offset` starts, if that message is a
/// "fragment reassembly time exceeded": its sender held the datagram's first fragment and gave
/// up waiting for the rest. `None` for any other message.
pub(crate) fn reassembly_timeout_quote<P: PacketBytes>(
    pkt: &P,
    family: IpFamily,
    offset: usize,
) -> Option<NetworkStart> {
    let [kind, code] = pkt.read::<2>(offset)?;
    let time_exceeded = match family {
        IpFamily::V4 => ICMPV4_TIME_EXCEEDED,
        IpFamily::V6 => ICMPV6_TIME_EXCEEDED,
    };
    (kind == time_exceeded && code == FRAGMENT_REASSEMBLY_TIME_EXCEEDED).then_some(NetworkStart {
        offset: offset + ICMP_HEADER_LEN,
        family,
    })
}

/// Whether the ICMP message at `offset` is a port unreachable quoting a UDP datagram sent from
/// one of `ports`: a DNS reply its destination refused.
#[inline(always)]
pub(crate) fn refuses_dns_reply<P: PacketBytes>(
    pkt: &P,
    family: IpFamily,
    offset: usize,
    ports: &DnsPorts,
) -> bool {
    if !is_port_unreachable(pkt, family, offset) {
        return false;
    }
    let quoted = offset + ICMP_HEADER_LEN;
    let udp = match family {
        IpFamily::V4 => {
            let Some(header) = pkt.read::<10>(quoted) else {
                return false;
            };
            if header[0] >> 4 != 4 || header[9] != IPPROTO_UDP {
                return false;
            }
            quoted + usize::from(header[0] & 0x0f) * 4
        }
        // Quoted extension headers are not walked: a DNS reply carries none.
        IpFamily::V6 => {
            let Some(header) = pkt.read::<7>(quoted) else {
                return false;
            };
            if header[0] >> 4 != 6 || header[6] != IPPROTO_UDP {
                return false;
            }
            quoted + IPV6_HEADER_LEN
        }
    };
    read_u16(pkt, udp).is_some_and(|source_port| ports.contains(source_port))
}
