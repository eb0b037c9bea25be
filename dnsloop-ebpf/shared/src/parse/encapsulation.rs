//! Overlay encapsulation: the Ethernet frame a VXLAN or Geneve datagram carries, so that a
//! capture of a node's underlay shows the DNS of the pods whose traffic crosses it. Userspace
//! only: the kernel programs watch the overlay devices themselves, where the frames are bare.

use super::bytes::{read_header, PacketBytes};
use super::class::Malformed;
use super::ip;
use super::link::{self, LinkLayer};
use super::transport::Transport;

/// How a frame was carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encapsulation {
    Vxlan,
    Geneve,
}

impl Encapsulation {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Vxlan => "vxlan",
            Self::Geneve => "geneve",
        }
    }
}

/// A frame found inside a VXLAN or Geneve datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encapsulated {
    pub encapsulation: Encapsulation,
    /// Absolute offsets of the inner Ethernet frame: its start, and the end of the outer
    /// datagram as declared (which may lie beyond the packet).
    pub frame_offset: usize,
    pub frame_end: usize,
}

impl Encapsulated {
    /// The inner frame in `packet`, the bytes `encapsulated_frame` found it at, as far as the
    /// packet holds it; `None` when it holds none of it.
    pub fn frame<'a>(&self, packet: &'a [u8]) -> Option<&'a [u8]> {
        packet.get(self.frame_offset..self.frame_end.min(packet.len()))
    }
}

/// VXLAN's IANA port, and the one Linux and flannel use by default.
const VXLAN_PORTS: [u16; 2] = [4789, 8472];
const GENEVE_PORT: u16 = 6081;
const UDP_HEADER_LEN: usize = 8;
const VXLAN_HEADER_LEN: usize = 8;
/// The I flag: the VNI is valid. Set on every VXLAN frame (RFC 7348).
const VXLAN_VNI_VALID: u8 = 0x08;
const GENEVE_HEADER_LEN: usize = 8;
/// Transparent Ethernet bridging: the payload is an Ethernet frame.
const GENEVE_ETHERNET: u16 = 0x6558;

/// The Ethernet frame that `pkt` carries in VXLAN or Geneve; `None` when `pkt` is not such a
/// datagram.
pub fn encapsulated_frame<P: PacketBytes>(pkt: &P, link: LinkLayer) -> Option<Encapsulated> {
    let start = link::network_start(pkt, link).ok()?;
    let datagram = ip::parse_ip(pkt, start).ok()?;
    if datagram.transport != Transport::Udp {
        return None;
    }
    let udp: [u8; UDP_HEADER_LEN] = read_header(
        pkt,
        datagram.l4_offset,
        datagram.end,
        Malformed::TruncatedL4,
    )
    .ok()?;
    let dport = u16::from_be_bytes([udp[2], udp[3]]);
    let payload = datagram.l4_offset + UDP_HEADER_LEN;
    if VXLAN_PORTS.contains(&dport) {
        let [flags, ..] = pkt.read::<VXLAN_HEADER_LEN>(payload)?;
        (flags & VXLAN_VNI_VALID != 0).then_some(Encapsulated {
            encapsulation: Encapsulation::Vxlan,
            frame_offset: payload + VXLAN_HEADER_LEN,
            frame_end: datagram.end,
        })
    } else if dport == GENEVE_PORT {
        let [version_and_options, _, protocol_hi, protocol_lo, ..] =
            pkt.read::<GENEVE_HEADER_LEN>(payload)?;
        let version = version_and_options >> 6;
        let options_len = usize::from(version_and_options & 0x3f) * 4;
        (version == 0 && u16::from_be_bytes([protocol_hi, protocol_lo]) == GENEVE_ETHERNET)
            .then_some(Encapsulated {
                encapsulation: Encapsulation::Geneve,
                frame_offset: payload + GENEVE_HEADER_LEN + options_len,
                frame_end: datagram.end,
            })
    } else {
        None
    }
}
