//! Link layer: finds where the IP header starts and which IP version it is.

use super::bytes::{read_u16, PacketBytes};
use super::class::{Malformed, Rejected, Skip};
use super::ip::IpFamily;

/// What precedes the IP header.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Ethernet II with up to two VLAN tags (TC on Ethernet devices; on `lo` with zero MACs).
    Ethernet = 0,
    /// The data starts at the IP header (TC on L3 devices such as WireGuard or tun, pcap
    /// `LINKTYPE_RAW`).
    RawIp = 1,
    /// pcap "Linux cooked" v1 (`tcpdump -i any`): 16-byte header, protocol at offset 14.
    LinuxSll = 2,
    /// pcap "Linux cooked" v2: 20-byte header, protocol at offset 0.
    LinuxSll2 = 3,
}

/// Where the IP header starts and which version the link layer announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NetworkStart {
    pub offset: usize,
    pub family: IpFamily,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// Single and double (QinQ) tagging; a third tag is counted as not IP rather than walked.
const MAX_VLAN_TAGS: usize = 2;
const VLAN_TAG_LEN: usize = 4;

const ETHERNET_HEADER_LEN: usize = 14;
const ETHERNET_ETHERTYPE_OFFSET: usize = 12;
const SLL_HEADER_LEN: usize = 16;
const SLL_PROTOCOL_OFFSET: usize = 14;
const SLL2_HEADER_LEN: usize = 20;
const SLL2_PROTOCOL_OFFSET: usize = 0;

/// Skips the link-layer header (and VLAN tags) in front of the IP header.
#[inline(always)]
pub(crate) fn network_start<P: PacketBytes>(
    pkt: &P,
    link: LinkLayer,
) -> Result<NetworkStart, Rejected> {
    let (protocol_offset, header_len) = match link {
        LinkLayer::RawIp => return raw_ip_start(pkt),
        LinkLayer::Ethernet => (ETHERNET_ETHERTYPE_OFFSET, ETHERNET_HEADER_LEN),
        LinkLayer::LinuxSll => (SLL_PROTOCOL_OFFSET, SLL_HEADER_LEN),
        LinkLayer::LinuxSll2 => (SLL2_PROTOCOL_OFFSET, SLL2_HEADER_LEN),
    };
    if pkt.len() < header_len {
        return Err(Malformed::TruncatedL2.into());
    }
    let mut ethertype = read_u16(pkt, protocol_offset).ok_or(Malformed::TruncatedL2)?;
    let mut offset = header_len;
    // A tag is TCI (2 bytes) then the inner ethertype (2 bytes).
    for _ in 0..MAX_VLAN_TAGS {
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            break;
        }
        ethertype = read_u16(pkt, offset + 2).ok_or(Malformed::TruncatedL2)?;
        offset += VLAN_TAG_LEN;
    }
    let family = match ethertype {
        ETHERTYPE_IPV4 => IpFamily::V4,
        ETHERTYPE_IPV6 => IpFamily::V6,
        _ => return Err(Skip::NotIp.into()),
    };
    Ok(NetworkStart { offset, family })
}

/// Raw IP has no header to announce the protocol: the version nibble is all there is.
#[inline(always)]
fn raw_ip_start<P: PacketBytes>(pkt: &P) -> Result<NetworkStart, Rejected> {
    let [first] = pkt.read::<1>(0).ok_or(Malformed::TruncatedL2)?;
    let family = match first >> 4 {
        4 => IpFamily::V4,
        6 => IpFamily::V6,
        _ => return Err(Skip::NotIp.into()),
    };
    Ok(NetworkStart { offset: 0, family })
}
