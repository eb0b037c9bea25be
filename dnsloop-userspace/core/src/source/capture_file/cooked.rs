//! The Linux "cooked" capture headers of `tcpdump -i any`: which interface a packet was seen
//! on and in which direction.
//!
//! v1 (`LINKTYPE_LINUX_SLL`, 16 bytes): packet type (2), hardware type (2), address length (2),
//! address (8), protocol (2). v2 (`LINKTYPE_LINUX_SLL2`, 20 bytes): protocol (2), reserved (2),
//! interface index (4), hardware type (2), packet type (1), address length (1), address (8).
//! Both big-endian.
use dnsloop_shared::point::Direction;

pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;
/// What a loopback device is called in every namespace.
pub const LOOPBACK_NAME: &str = "lo";
/// `ARPHRD_LOOPBACK`: the hardware type of a loopback device.
const ARPHRD_LOOPBACK: u16 = 772;
/// `PACKET_OUTGOING`: sent by this host. `PACKET_HOST`, `_BROADCAST`, `_MULTICAST` and
/// `_OTHERHOST` (0-3) were received.
const PACKET_OUTGOING: u16 = 4;
const PACKET_OTHERHOST: u16 = 3;

/// Which interface of a capture a packet belongs to, beyond its interface block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The block's own interface.
    Block,
    /// A loopback device, in a v1 capture of `-i any` (which numbers no interface).
    Loopback,
    /// Interface number N, in a v2 capture.
    Ifindex(u32),
}

/// What a cooked header says; nothing for other link types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cooked {
    packet_type: Option<u16>,
    ifindex: Option<u32>,
    loopback: bool,
}

impl Cooked {
    /// Reads the header of `data`, a packet of `linktype`; a header cut short says nothing.
    pub fn read(linktype: u32, data: &[u8]) -> Self {
        let u16_at = |at: usize| {
            data.get(at..at + 2)
                .map(|bytes| u16::from_be_bytes([bytes[0], bytes[1]]))
        };
        match linktype {
            LINKTYPE_LINUX_SLL => Self {
                packet_type: u16_at(0),
                ifindex: None,
                loopback: u16_at(2) == Some(ARPHRD_LOOPBACK),
            },
            LINKTYPE_LINUX_SLL2 => Self {
                packet_type: data.get(10).map(|&byte| u16::from(byte)),
                ifindex: data
                    .get(4..8)
                    .map(|bytes| u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
                loopback: u16_at(8) == Some(ARPHRD_LOOPBACK),
            },
            _ => Self::default(),
        }
    }

    pub fn origin(&self) -> Origin {
        match (self.ifindex, self.loopback) {
            (Some(ifindex), _) => Origin::Ifindex(ifindex),
            (None, true) => Origin::Loopback,
            (None, false) => Origin::Block,
        }
    }

    pub fn ifindex(&self) -> Option<u32> {
        self.ifindex
    }

    pub fn is_loopback(&self) -> bool {
        self.loopback
    }

    pub fn direction(&self) -> Option<Direction> {
        match self.packet_type? {
            PACKET_OUTGOING => Some(Direction::Egress),
            0..=PACKET_OTHERHOST => Some(Direction::Ingress),
            _ => None,
        }
    }
}
