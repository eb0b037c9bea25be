//! Transport layer: UDP and TCP headers, the DNS port filter, and where the payload lies.

use super::bytes::{read_header, PacketBytes};
use super::class::{Malformed, Rejected, Skip};
use super::ip::Datagram;

/// The transport protocol, with its IP protocol number as discriminant.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp = 17,
    Tcp = 6,
}

impl Transport {
    /// As dnsloop writes it: `udp` or `tcp`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }

    #[inline(always)]
    pub(crate) fn from_protocol(protocol: u8) -> Option<Self> {
        match protocol {
            17 => Some(Self::Udp),
            6 => Some(Self::Tcp),
            _ => None,
        }
    }
}

pub const MAX_DNS_PORTS: usize = 8;

/// The ports DNS is served on. A packet is DNS if its source or destination port is one of them.
///
/// `#[repr(C)]` with no padding so that it can live in a BPF global or map as is. The ports fill
/// the first slots and the unused ones are zero, so the first zero ends the list: nearly every
/// packet is not DNS, and with one port configured its check stops after one slot instead of
/// eight. Port 0 is never DNS, so it never matches.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DnsPorts {
    ports: [u16; MAX_DNS_PORTS],
}

impl DnsPorts {
    /// The ports of a list written in the source, which the compiler checks fits: a longer one
    /// does not build. Zeros are left out.
    #[inline(always)]
    pub fn new<const N: usize>(ports: &[u16; N]) -> Self {
        const { assert!(N <= MAX_DNS_PORTS, "DnsPorts has MAX_DNS_PORTS slots") };
        Self::filled(ports)
    }

    /// The ports of a list given at run time (`--dns-port`), refused when there are more than
    /// [`MAX_DNS_PORTS`] other than 0 rather than cut short: a port left out would hide its
    /// traffic without a word.
    pub fn from_list(ports: &[u16]) -> Result<Self, TooManyDnsPorts> {
        let given = ports.iter().filter(|&&port| port != 0).count();
        if given > MAX_DNS_PORTS {
            return Err(TooManyDnsPorts { given });
        }
        Ok(Self::filled(ports))
    }

    /// The first [`MAX_DNS_PORTS`] ports other than 0: every one, as both callers checked.
    #[inline(always)]
    fn filled(ports: &[u16]) -> Self {
        let mut slots = [0; MAX_DNS_PORTS];
        let given = ports.iter().filter(|&&port| port != 0);
        for (slot, port) in slots.iter_mut().zip(given) {
            *slot = *port;
        }
        Self { ports: slots }
    }

    /// The ports in slot form, first slots first and unused slots zero: for a global the loader
    /// patches as is.
    pub const fn from_slots(slots: [u16; MAX_DNS_PORTS]) -> Self {
        Self { ports: slots }
    }

    #[inline(always)]
    pub fn contains(&self, port: u16) -> bool {
        self.contains_either(port, port)
    }

    /// Whether `a` or `b` is one of the ports: one walk of the slots for both.
    #[inline(always)]
    pub fn contains_either(&self, a: u16, b: u16) -> bool {
        for &port in &self.ports {
            if port == 0 {
                return false;
            }
            if port == a || port == b {
                return true;
            }
        }
        false
    }
}

/// More DNS ports than [`DnsPorts`] has slots for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyDnsPorts {
    /// The ports given, zeros left out.
    pub given: usize,
}

impl core::fmt::Display for TooManyDnsPorts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "at most {MAX_DNS_PORTS} DNS ports can be given, {} were",
            self.given
        )
    }
}

impl core::error::Error for TooManyDnsPorts {}

/// Ports and payload location of a DNS segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TransportPayload {
    pub sport: u16,
    pub dport: u16,
    pub offset: usize,
    /// Payload bytes the packet holds.
    pub len: usize,
    /// Payload bytes the headers declare; more than `len` when the packet was cut short.
    pub declared_len: usize,
}

const UDP_HEADER_LEN: usize = 8;
const TCP_HEADER_LEN: usize = 20;
const TCP_MIN_DATA_OFFSET: u8 = 5;

/// Parses the UDP or TCP header of `datagram`, keeping only DNS traffic.
#[inline(always)]
pub(crate) fn parse_transport<P: PacketBytes>(
    pkt: &P,
    datagram: &Datagram,
    ports: &DnsPorts,
) -> Result<TransportPayload, Rejected> {
    let l4 = datagram.l4_offset;
    let (sport, dport, offset, declared_len) = match datagram.transport {
        Transport::Udp => {
            let header =
                read_header::<_, UDP_HEADER_LEN>(pkt, l4, datagram.end, Malformed::TruncatedL4)?;
            let (sport, dport) = dns_ports([header[0], header[1], header[2], header[3]], ports)?;
            // The UDP length covers the whole datagram; a first fragment holds only its start.
            let udp_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
            if udp_len < UDP_HEADER_LEN {
                return Err(Malformed::BadUdpLength.into());
            }
            (sport, dport, l4 + UDP_HEADER_LEN, udp_len - UDP_HEADER_LEN)
        }
        Transport::Tcp => {
            let header =
                read_header::<_, TCP_HEADER_LEN>(pkt, l4, datagram.end, Malformed::TruncatedL4)?;
            let (sport, dport) = dns_ports([header[0], header[1], header[2], header[3]], ports)?;
            let data_offset = header[12] >> 4;
            if data_offset < TCP_MIN_DATA_OFFSET {
                return Err(Malformed::BadTcpOffset.into());
            }
            let offset = l4 + usize::from(data_offset) * 4;
            // Options are skipped, not read, but must be inside the datagram and the packet.
            if offset > datagram.end {
                return Err(Malformed::BadIpLength.into());
            }
            if offset > pkt.len() {
                return Err(Malformed::TruncatedL4.into());
            }
            (sport, dport, offset, datagram.end - offset)
        }
    };
    // Both checks above put `offset` inside the datagram and the packet, so this cannot wrap.
    let held = datagram.end.min(pkt.len()) - offset;
    Ok(TransportPayload {
        sport,
        dport,
        offset,
        len: declared_len.min(held),
        declared_len,
    })
}

/// Where a TCP segment lies in its stream, for reassembling the messages that span segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpPosition {
    /// The sequence number of the segment's first payload byte (of the SYN itself on a SYN).
    pub seq: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
}

const TCP_SEQ_OFFSET: usize = 4;
const TCP_FLAGS_OFFSET: usize = 13;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;

/// The stream position of the TCP segment `seg` that `classify` found in `pkt`; `None` for UDP.
pub fn tcp_position<P: PacketBytes>(pkt: &P, seg: &super::Segment) -> Option<TcpPosition> {
    if seg.transport != Transport::Tcp {
        return None;
    }
    let seq = pkt.read::<4>(seg.l4_offset + TCP_SEQ_OFFSET)?;
    let [flags] = pkt.read::<1>(seg.l4_offset + TCP_FLAGS_OFFSET)?;
    Some(TcpPosition {
        seq: u32::from_be_bytes(seq),
        syn: flags & TCP_SYN != 0,
        fin: flags & TCP_FIN != 0,
        rst: flags & TCP_RST != 0,
    })
}

/// The source and destination ports (the first 4 bytes of UDP and TCP), if either is DNS.
#[inline(always)]
fn dns_ports(first_four: [u8; 4], ports: &DnsPorts) -> Result<(u16, u16), Skip> {
    let [sport_hi, sport_lo, dport_hi, dport_lo] = first_four;
    let sport = u16::from_be_bytes([sport_hi, sport_lo]);
    let dport = u16::from_be_bytes([dport_hi, dport_lo]);
    if ports.contains_either(sport, dport) {
        Ok((sport, dport))
    } else {
        Err(Skip::NotDnsPort)
    }
}
