//! The point table: where packets are seen (an interface, and a direction across it), what the
//! programs know about each watched point, and the packets counted there.

/// Which way a packet crossed the interface it was seen on.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Ingress = 0,
    Egress = 1,
}

impl Direction {
    pub fn from_u8(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Ingress),
            1 => Some(Self::Egress),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
        }
    }
}

/// One observation point: an interface, and a direction across it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObservationPoint {
    /// For loopback (ifindex 1 in every namespace): the cookie of the namespace whose `lo` it
    /// is, as `SO_NETNS_COOKIE` reports it. Zero for every other interface, which userspace only
    /// watches in its own namespace.
    pub netns_cookie: u64,
    pub ifindex: u32,
    pub direction: u8,
    // Padding as scalars, not `[u8; 3]`: zeroing an array compiles, in BPF, to a `memset` call
    // that loops over the bytes, on every packet.
    _pad1: u8,
    _pad2: u16,
}

impl ObservationPoint {
    #[inline(always)]
    pub const fn new(netns_cookie: u64, ifindex: u32, direction: u8) -> Self {
        Self {
            netns_cookie,
            ifindex,
            direction,
            _pad1: 0,
            _pad2: 0,
        }
    }
}

/// Per observation point counts, kept per CPU and summed by userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointCounters {
    /// Every packet the program ran on.
    pub packets: u64,
    /// Packets that carried at least one parsed DNS message on a DNS port.
    pub dns_packets: u64,
}

/// Slots of the point table, and how many of them the programs look at for one point. The
/// per-point counters have as many slots. 4096 covers a node with ~1000 pods (2 points on each
/// veth, 1 on each pod's loopback).
pub const POINT_SLOTS: u32 = 4096;
pub const POINT_CANDIDATES: u32 = 16;
/// How far apart a point's candidate slots are: coprime with `POINT_SLOTS`, so they are all distinct, and
/// far enough to leave a run of taken slots (the node's interfaces, numbered in a row).
const POINT_CANDIDATE_STRIDE: u32 = 1031;

const _: () = assert!(POINT_SLOTS.is_power_of_two() && POINT_CANDIDATE_STRIDE % 2 == 1);

/// A watched observation point in the point table, at slot [`PointSlot::index`] of one of its
/// candidate slots, with what the programs need to know about it. Userspace registers every point before
/// attaching there. A slot whose point has `ifindex` 0, which no interface has, is free; the
/// programs look at every candidate slot of a point, so a point is removed by zeroing its slot alone.
///
/// An array searched by index rather than a hash map: every packet asks, and an array lookup is
/// a few instructions where a hash lookup is a helper call, a hash and a bucket walk (on a busy
/// node, cache misses across CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointSlot {
    pub point: ObservationPoint,
    /// The namespaces its packets leave and enter.
    pub namespaces: PointNamespaces,
    /// On a port of a bridge whose own interface is not watched: the bridge's MAC
    /// ([`mac_word`]), 0 elsewhere. A frame sent to it (ingress) or by it (egress) is routed by
    /// the node, so it also enters or leaves the node, as `via_gateway` says: one program run
    /// then sees the whole crossing, which took two (the port, then the bridge).
    pub gateway_mac: u64,
    /// The namespaces a frame to or from `gateway_mac` leaves and enters.
    pub via_gateway: PointNamespaces,
    /// A `parse::LinkLayer as u8`: how its frames start.
    pub link_layer: u8,
    // Scalars, as in `ObservationPoint`.
    _pad1: u8,
    _pad2: u16,
}

impl PointSlot {
    pub const FREE: Self = Self::new(ObservationPoint::new(0, 0, 0), PointNamespaces::NONE, 0);

    #[inline(always)]
    pub const fn new(point: ObservationPoint, namespaces: PointNamespaces, link_layer: u8) -> Self {
        Self {
            point,
            namespaces,
            gateway_mac: 0,
            via_gateway: PointNamespaces::NONE,
            link_layer,
            _pad1: 0,
            _pad2: 0,
        }
    }

    /// This slot on a bridge port whose frames to or from `gateway_mac` cross `via_gateway`.
    pub const fn with_gateway(mut self, gateway_mac: u64, via_gateway: PointNamespaces) -> Self {
        self.gateway_mac = gateway_mac;
        self.via_gateway = via_gateway;
        self
    }

    /// The slot of `point`'s candidate number `candidate` (0 to `POINT_CANDIDATES - 1`).
    ///
    /// The node's own interfaces (cookie 0) are numbered in a row by the kernel: each has its
    /// home at twice its index, one slot a direction, so they do not collide until the indices
    /// wrap around the table. A pod's loopback (ifindex 1, its namespace's cookie) has its home
    /// wherever its cookie scatters it.
    #[inline(always)]
    pub fn index(point: &ObservationPoint, candidate: u32) -> u32 {
        let cookie = (point.netns_cookie ^ (point.netns_cookie >> 32)) as u32;
        let home = point
            .ifindex
            .wrapping_mul(2)
            .wrapping_add(u32::from(point.direction))
            ^ cookie.wrapping_mul(0x9e37_79b9);
        home.wrapping_add(candidate.wrapping_mul(POINT_CANDIDATE_STRIDE)) % POINT_SLOTS
    }

    pub fn is_free(&self) -> bool {
        self.point.ifindex == 0
    }
}

/// Bytes at the start of an Ethernet frame that [`via_gateway`] reads: both MACs.
pub const MAC_HEADER_LEN: usize = 12;

/// A MAC address as the point table holds it: its six bytes, big-endian, in the low 48 bits.
#[inline(always)]
pub const fn mac_word(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]])
}

/// Whether an Ethernet frame starting with `macs` (destination, then source), seen in
/// `direction` on a bridge port whose bridge has `gateway_mac`, is routed by the node: sent to
/// the bridge (ingress) or by it (egress). The kernel programs and a capture's reader both place
/// a port's frames by this.
#[inline(always)]
pub fn via_gateway(gateway_mac: u64, direction: u8, macs: &[u8; MAC_HEADER_LEN]) -> bool {
    let at = if direction == Direction::Ingress as u8 {
        0
    } else {
        6
    };
    let mac = [
        macs[at],
        macs[at + 1],
        macs[at + 2],
        macs[at + 3],
        macs[at + 4],
        macs[at + 5],
    ];
    gateway_mac != 0 && mac_word(mac) == gateway_mac
}

/// The namespaces a packet leaves and enters where it is seen, as userspace numbers them for
/// the kernel (see `points`); 0 is a side that is not watched.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointNamespaces {
    pub leaves: u32,
    pub enters: u32,
}

impl PointNamespaces {
    pub const NONE: Self = Self {
        leaves: 0,
        enters: 0,
    };
}

#[cfg(feature = "user")]
crate::pod!(ObservationPoint, PointCounters, PointNamespaces, PointSlot);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn point_types_have_no_implicit_padding() {
        assert_eq!(size_of::<ObservationPoint>(), 16);
        assert_eq!(size_of::<PointCounters>(), 16);
        assert_eq!(size_of::<PointNamespaces>(), 8);
        assert_eq!(size_of::<PointSlot>(), 48);
    }

    #[test]
    fn a_port_frame_is_via_the_gateway_when_the_bridge_sends_or_receives_it() {
        let bridge = [0x02, 0, 0, 0, 0, 0x01];
        let pod = [0x02, 0, 0, 0, 0, 0x03];
        let gateway = mac_word(bridge);
        let frame = |to: [u8; 6], from: [u8; 6]| {
            let mut macs = [0; MAC_HEADER_LEN];
            macs[..6].copy_from_slice(&to);
            macs[6..].copy_from_slice(&from);
            macs
        };
        let (ingress, egress) = (Direction::Ingress as u8, Direction::Egress as u8);
        assert!(via_gateway(gateway, ingress, &frame(bridge, pod)));
        assert!(via_gateway(gateway, egress, &frame(pod, bridge)));
        assert!(
            !via_gateway(gateway, ingress, &frame(pod, bridge)),
            "another port's frame"
        );
        assert!(!via_gateway(gateway, egress, &frame(bridge, pod)));
        assert!(!via_gateway(0, ingress, &frame([0; 6], pod)), "no gateway");
    }
}
