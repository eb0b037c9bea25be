//! Where each observation point sits: the namespaces a packet leaves and enters there.
//!
//! Each namespace crossing is watched once. A pod behind a routed veth crosses it alone; a pod
//! on a bridge crosses its port, and, when it talks to the node, the bridge's own interface
//! too. The bridge's own interface is not watched: a frame on a port that was sent to the
//! bridge's MAC (or by it) is one the node routes, so the port's one sighting of it says it
//! leaves the pod and enters the node (or the other way); other frames pass from port to port.
//!
//! Live, a link's [`Role`] comes from rtnetlink; in a capture dnsloop wrote, from the
//! interface's description ([`LinkDescription`]), so both place a packet at the same point.
use std::{
    collections::{HashMap, HashSet},
    fmt,
    net::IpAddr,
    str::FromStr,
    sync::Arc,
};

use dnsloop_shared::{
    parse::LinkLayer,
    point::{mac_word, via_gateway, Direction, ObservationPoint, PointNamespaces, MAC_HEADER_LEN},
};

use crate::observation::{Namespace, Point};

/// The namespace the tracer runs in: on a node, the host's.
pub const NODE: &str = "node";

/// Every network namespace's loopback is interface 1.
pub const LOOPBACK_INDEX: u32 = 1;

/// A point as the programs need to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPoint {
    pub point: ObservationPoint,
    pub namespaces: PointNamespaces,
    pub link_layer: LinkLayer,
    /// On a bridge port whose bridge is not watched: the bridge's MAC (`mac_word`), and the
    /// namespaces a frame to or from it crosses. 0 and none elsewhere.
    pub gateway_mac: u64,
    pub via_gateway: PointNamespaces,
}

/// The interface a packet was seen on, as its source identifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InterfaceRef {
    /// Non-zero only for loopback interfaces seen by the kernel programs (see `ObservationPoint`).
    pub netns_cookie: u64,
    pub ifindex: u32,
}

/// Where a packet was seen: what places it at a [`Point`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seen {
    pub interface: InterfaceRef,
    pub direction: Direction,
    /// On a bridge port, whether the frame went to or came from the bridge itself (see
    /// [`LinkPoints`]).
    pub via_gateway: bool,
}

impl Seen {
    /// Where the kernel programs say they saw a packet, from the fields of their records and
    /// tables; `None` for a direction they never write.
    pub fn from_kernel(
        netns_cookie: u64,
        ifindex: u32,
        direction: u8,
        via_gateway: bool,
    ) -> Option<Self> {
        Some(Self {
            interface: InterfaceRef {
                netns_cookie,
                ifindex,
            },
            direction: Direction::from_u8(direction)?,
            via_gateway,
        })
    }
}

/// Resolves where a raw packet was seen to a [`Point`], and tells how each interface is
/// described in a saved capture.
#[derive(Default)]
pub struct PointMap {
    links: HashMap<InterfaceRef, WatchedLink>,
    /// The numbers the kernel programs know namespaces by (see `kernel_points`).
    namespace_numbers: HashMap<Namespace, u32>,
    /// The addresses each namespace whose addresses are known holds, with the interface that
    /// holds each: what tells a query delivered there from one routed through (see
    /// [`PointMap::holds`]).
    addresses: HashMap<Namespace, HashSet<(u32, IpAddr)>>,
}

struct WatchedLink {
    name: Arc<str>,
    description: LinkDescription,
    link_layer: LinkLayer,
    points: LinkPoints,
    /// Where the tracer attaches: a loopback is watched on egress only.
    directions: &'static [Direction],
}

impl PointMap {
    /// Registers interface `index` of the node namespace, named `name`, which `description`
    /// places.
    pub fn insert_link(
        &mut self,
        index: u32,
        name: &str,
        description: LinkDescription,
        link_layer: LinkLayer,
    ) {
        let interface = InterfaceRef {
            // The kernel tags loopback records with their namespace's cookie; the node's own
            // loopback is registered by `insert_loopback`.
            netns_cookie: 0,
            ifindex: index,
        };
        self.insert(
            interface,
            name,
            description,
            link_layer,
            &[Direction::Ingress, Direction::Egress],
        );
    }

    /// Forgets interface `index` of the node namespace.
    pub fn remove_link(&mut self, index: u32) {
        self.links.remove(&InterfaceRef {
            netns_cookie: 0,
            ifindex: index,
        });
    }

    /// Registers the loopback of the namespace with `netns_cookie`, named `namespace`; it is
    /// watched on egress only, where the tracer attaches to a loopback.
    pub fn insert_loopback(&mut self, netns_cookie: u64, namespace: Namespace) {
        let interface = InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        };
        let description = LinkDescription {
            role: Role::Loopback,
            namespace: Some(namespace),
            gateway: None,
        };
        self.insert(
            interface,
            "lo",
            description,
            LinkLayer::Ethernet,
            &[Direction::Egress],
        );
    }

    /// Forgets the loopback of the namespace with `netns_cookie`.
    pub fn remove_loopback(&mut self, netns_cookie: u64) {
        self.links.remove(&InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        });
    }

    /// Renames the namespace of the watched loopback of the namespace with `netns_cookie`; one
    /// not watched stays so.
    pub fn rename_loopback(&mut self, netns_cookie: u64, namespace: Namespace) {
        let interface = InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        };
        if self.links.contains_key(&interface) {
            self.insert_loopback(netns_cookie, namespace);
        }
    }

    fn insert(
        &mut self,
        interface: InterfaceRef,
        ifname: &str,
        description: LinkDescription,
        link_layer: LinkLayer,
        directions: &'static [Direction],
    ) {
        let watched = WatchedLink {
            name: ifname.into(),
            points: description.points(ifname),
            description,
            link_layer,
            directions,
        };
        self.links.insert(interface, watched);
    }

    pub fn get(&self, seen: Seen) -> Option<&Arc<Point>> {
        let link = self.links.get(&seen.interface)?;
        link.directions
            .contains(&seen.direction)
            .then(|| link.points.get(seen.direction, seen.via_gateway))
    }

    /// Every watched point as the kernel programs need to know it: how its frames start, and,
    /// to follow a question from namespace to namespace, the namespaces its packets leave and
    /// enter, numbered from 1 (0: none). A namespace keeps its number while dnsloop runs.
    pub fn kernel_points(&mut self) -> Vec<KernelPoint> {
        let Self {
            links,
            namespace_numbers,
            ..
        } = self;
        let mut number = |namespace: &Option<Namespace>| match namespace {
            Some(namespace) => {
                let next = namespace_numbers.len() as u32 + 1;
                *namespace_numbers.entry(namespace.clone()).or_insert(next)
            }
            None => 0,
        };
        let mut numbered = |point: &Point| PointNamespaces {
            leaves: number(&point.leaves),
            enters: number(&point.enters),
        };
        let mut kernel_points = Vec::new();
        for (interface, link) in links.iter() {
            for &direction in link.directions {
                let point = ObservationPoint::new(
                    interface.netns_cookie,
                    interface.ifindex,
                    direction as u8,
                );
                let namespaces = numbered(link.points.get(direction, false));
                let via_gateway = match link.points.gateway_mac() {
                    0 => PointNamespaces::NONE,
                    _ => numbered(link.points.get(direction, true)),
                };
                kernel_points.push(KernelPoint {
                    point,
                    namespaces,
                    link_layer: link.link_layer,
                    gateway_mac: link.points.gateway_mac(),
                    via_gateway,
                });
            }
        }
        kernel_points
    }

    /// Records that interface `index` of `namespace` holds `address`: from then on every
    /// address `namespace` holds is known (see [`PointMap::holds`]).
    pub fn add_address(&mut self, namespace: &Namespace, index: u32, address: IpAddr) {
        self.addresses
            .entry(namespace.clone())
            .or_default()
            .insert((index, address));
    }

    /// Records that interface `index` of `namespace` no longer holds `address`.
    pub fn remove_address(&mut self, namespace: &Namespace, index: u32, address: IpAddr) {
        if let Some(held) = self.addresses.get_mut(namespace) {
            held.remove(&(index, address));
        }
    }

    /// Forgets what `namespace` holds: it is gone, or known by another name now.
    pub fn forget_addresses(&mut self, namespace: &Namespace) {
        self.addresses.remove(namespace);
    }

    /// Whether `namespace` holds `address`, so that a packet to it entering there can be
    /// delivered there: `None` when its addresses are not known. Loopback addresses are every
    /// namespace's own.
    pub fn holds(&self, namespace: &Namespace, address: IpAddr) -> Option<bool> {
        if address.is_loopback() {
            return Some(true);
        }
        let held = self.addresses.get(namespace)?;
        Some(held.iter().any(|&(_, own)| own == address))
    }

    /// The name and description of `interface`, as a saved capture records them.
    pub fn link(&self, interface: InterfaceRef) -> Option<(&str, &LinkDescription)> {
        self.links
            .get(&interface)
            .map(|link| (link.name.as_ref(), &link.description))
    }
}

/// What a link connects, as far as placing packets goes: a link's role on the node without the
/// kernel's ids, which mean nothing outside the running node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Loopback,
    BridgeMaster,
    Veth { bridged: bool },
    Other { bridged: bool },
}

impl Role {
    /// The role of a bridge port for the frames it exchanges with the bridge itself: those are
    /// routed by the node, as if the port were a link of the node's own.
    fn unbridged(self) -> Self {
        match self {
            Self::Veth { .. } => Self::Veth { bridged: false },
            Self::Other { .. } => Self::Other { bridged: false },
            role => role,
        }
    }
}

/// An interface's role and the namespace it leads to, as `dnsloop` writes it into the
/// interface description (`if_description`) of the captures it saves, and reads it back, so
/// that analysing a saved capture places every packet where the live trace did.
///
/// The format, version 2, is one line of space-separated fields:
///
/// ```text
/// dnsloop/2 role=veth bridged=1 gateway=02:42:0a:f4:00:01 ns=pod 10.244.0.3
/// dnsloop/2 role=veth bridged=1 ns=pod kube-system/coredns-5d78c9869d-abcde
/// dnsloop/2 role=loopback ns=pod 10.244.0.3
/// dnsloop/2 role=bridge
/// dnsloop/2 role=other bridged=0
/// ```
///
/// `role` is `loopback`, `bridge` (a bridge's own interface), `veth` or `other`; `bridged`
/// (`0` or `1`, veth and other only) says whether the link is a bridge port; `gateway`, on a
/// bridge port whose bridge was not watched, is the bridge's MAC: frames to it (received) or
/// from it (sent) crossed into or out of the node there. `ns`, always last and running to the
/// end of the line, names the namespace at the far end of a veth or the one a loopback belongs
/// to. Version 1, written before `gateway` existed, is the same without it, and is read too. A
/// later, incompatible format gets a new version number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkDescription {
    pub role: Role,
    pub namespace: Option<Namespace>,
    pub gateway: Option<[u8; 6]>,
}

/// What starts every description dnsloop writes, and the older one it reads too.
const DESCRIPTION_VERSION: &str = "dnsloop/2";
const DESCRIPTION_VERSION_1: &str = "dnsloop/1";

/// The points of one link: in each direction, and, on a bridge port whose bridge is not watched,
/// in each direction for frames to or from the bridge itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkPoints {
    /// Ingress first. Shared by every observation made there.
    points: [Arc<Point>; 2],
    /// The bridge's MAC (`mac_word`) and the points of frames to or from it.
    gateway: Option<(u64, [Arc<Point>; 2])>,
}

impl LinkPoints {
    pub fn get(&self, direction: Direction, via_gateway: bool) -> &Arc<Point> {
        let points = match &self.gateway {
            Some((_, points)) if via_gateway => points,
            _ => &self.points,
        };
        &points[direction as usize]
    }

    /// The bridge's MAC as the kernel programs compare it, 0 if none.
    pub fn gateway_mac(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |(mac, _)| *mac)
    }

    /// Whether `frame`, seen in `direction`, went to or came from the bridge itself, as the
    /// kernel programs decide it.
    pub fn via_gateway(&self, direction: Direction, frame: &[u8]) -> bool {
        let macs = frame
            .get(..MAC_HEADER_LEN)
            .and_then(|macs| <&[u8; MAC_HEADER_LEN]>::try_from(macs).ok());
        macs.is_some_and(|macs| via_gateway(self.gateway_mac(), direction as u8, macs))
    }
}

impl LinkDescription {
    /// The points of interface `ifname`: a veth whose far end is unnamed leads to
    /// `pod@<ifname>`, as live.
    pub fn points(&self, ifname: &str) -> LinkPoints {
        let node = Namespace::new(NODE);
        let name: Arc<str> = ifname.into();
        let far = self
            .namespace
            .clone()
            .unwrap_or_else(|| Namespace::new(&format!("pod@{ifname}")));
        let points = |role: Role| {
            [Direction::Ingress, Direction::Egress].map(|direction| {
                let (leaves, enters) = match (role, &self.namespace) {
                    (Role::Loopback, Some(own)) => (Some(own.clone()), Some(own.clone())),
                    (role, _) => crossing(&role, &node, &far, direction),
                };
                Arc::new(Point {
                    ifname: name.clone(),
                    direction,
                    leaves,
                    enters,
                })
            })
        };
        LinkPoints {
            points: points(self.role),
            gateway: self
                .gateway
                .map(|mac| (mac_word(mac), points(self.role.unbridged()))),
        }
    }
}

impl fmt::Display for LinkDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (role, bridged) = match self.role {
            Role::Loopback => ("loopback", None),
            Role::BridgeMaster => ("bridge", None),
            Role::Veth { bridged } => ("veth", Some(bridged)),
            Role::Other { bridged } => ("other", Some(bridged)),
        };
        write!(f, "{DESCRIPTION_VERSION} role={role}")?;
        if let Some(bridged) = bridged {
            write!(f, " bridged={}", u8::from(bridged))?;
        }
        if let Some(mac) = self.gateway {
            write!(f, " gateway={}", MacDisplay(mac))?;
        }
        if let Some(namespace) = &self.namespace {
            write!(f, " ns={namespace}")?;
        }
        Ok(())
    }
}

/// A MAC address written as `02:42:0a:f4:00:01`.
pub struct MacDisplay(pub [u8; 6]);

impl fmt::Display for MacDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0; 6];
    let mut bytes = text.split(':');
    for byte in &mut mac {
        let part = bytes.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    bytes.next().is_none().then_some(mac)
}

/// Why an interface description is not one `dnsloop` can read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    #[error("not written by dnsloop")]
    Foreign,
    #[error("written by a dnsloop whose format ({0}) this one does not know: use a newer dnsloop")]
    Version(String),
    #[error("`{0}` is not a field of the {DESCRIPTION_VERSION} format")]
    Field(String),
    #[error("it names no role")]
    NoRole,
}

impl FromStr for LinkDescription {
    type Err = DescriptionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (version, mut rest) = text.split_once(' ').unwrap_or((text, ""));
        if !version.starts_with("dnsloop/") {
            return Err(DescriptionError::Foreign);
        }
        if version != DESCRIPTION_VERSION && version != DESCRIPTION_VERSION_1 {
            return Err(DescriptionError::Version(version.into()));
        }
        let (mut role, mut bridged, mut namespace, mut gateway) = (None, false, None, None);
        while !rest.is_empty() {
            if let Some(name) = rest.strip_prefix("ns=") {
                namespace = Some(Namespace::new(name));
                break;
            }
            let (field, next) = rest.split_once(' ').unwrap_or((rest, ""));
            match field.split_once('=') {
                Some(("role", value)) => role = Some(value),
                Some(("bridged", "0")) => bridged = false,
                Some(("bridged", "1")) => bridged = true,
                Some(("gateway", mac)) if version == DESCRIPTION_VERSION => {
                    gateway =
                        Some(parse_mac(mac).ok_or_else(|| DescriptionError::Field(field.into()))?)
                }
                _ => return Err(DescriptionError::Field(field.into())),
            }
            rest = next;
        }
        let role = match role.ok_or(DescriptionError::NoRole)? {
            "loopback" => Role::Loopback,
            "bridge" => Role::BridgeMaster,
            "veth" => Role::Veth { bridged },
            "other" => Role::Other { bridged },
            unknown => return Err(DescriptionError::Field(format!("role={unknown}"))),
        };
        Ok(Self {
            role,
            namespace,
            gateway,
        })
    }
}

/// Which namespaces a packet crossing a link of `role` in `direction` leaves and enters; `far`
/// is the namespace at the other end of a veth.
pub fn crossing(
    role: &Role,
    node: &Namespace,
    far: &Namespace,
    direction: Direction,
) -> (Option<Namespace>, Option<Namespace>) {
    let ingress = direction == Direction::Ingress;
    let inside = |namespace: Namespace| {
        if ingress {
            (Some(namespace), None)
        } else {
            (None, Some(namespace))
        }
    };
    match role {
        Role::Loopback => (Some(node.clone()), Some(node.clone())),
        // Between the bridge and the node's own stack.
        Role::BridgeMaster | Role::Other { bridged: false } => {
            if ingress {
                (None, Some(node.clone()))
            } else {
                (Some(node.clone()), None)
            }
        }
        // A bridge port, for frames between what is plugged into it and another port.
        Role::Veth { bridged: true } => inside(far.clone()),
        Role::Other { bridged: true } => (None, None),
        // A point-to-point veth: straight between the node and the far namespace.
        Role::Veth { bridged: false } => {
            if ingress {
                (Some(far.clone()), Some(node.clone()))
            } else {
                (Some(node.clone()), Some(far.clone()))
            }
        }
    }
}

#[cfg(test)]
mod tests;
