//! Placing captured packets: which namespaces a packet left and entered where it was captured.
//!
//! Live, the kernel says which interface and direction a packet was seen at, and rtnetlink what
//! the interface connects. A capture file says less, so the rules below are tried in order:
//!
//! a. An interface whose pcapng `if_description` `dnsloop` wrote ([`LinkDescription`]) is
//!    placed exactly as the live trace placed it (on a bridge port, by the frame's MACs).
//! b. An interface with a name gets the role its name suggests ([`role_of_name`]): `lo` a
//!    loopback, the usual bridges a bridge, the usual pod-side veths a veth to a pod named after
//!    it (`pod@vethXYZ`, bridged when the capture also holds a bridge), anything else an
//!    interface between the node and the outside.
//! c. Otherwise, with a direction, the capture's own namespace is the `node`: a packet coming in
//!    leaves the namespace named after its source address (`host 10.244.0.3`) and enters the
//!    node; one going out leaves the node and enters the one named after its destination.
//! d. A file that records no direction (a plain Ethernet capture, `tcpdump -i cni0 -w`) still
//!    shows it in its MAC addresses: the node's side of a link is the MAC that fronts the most
//!    IP addresses (a router or bridge carries frames for many; a pod only for its own), so
//!    frames from it go out and frames to it come in. Then rule b or c applies. A frame that
//!    neither comes from nor goes to that MAC, or any frame when no MAC fronts at least two
//!    addresses more than any other, leaves the host of its source and enters the host of its
//!    destination; so does raw IP that records no direction. Such a frame is reported as
//!    ingress: a capture point that cannot tell directions is a tap, receiving everything.
//!
//! e. Before c, an interface that leads off the node is placed as one between the node and the
//!    outside, as rule b places `eth0` or `vxlan0`: one that carried DNS inside VXLAN or
//!    Geneve (an underlay), or DNS to or from an address that no pod of the node holds (an
//!    overlay, or the uplink), the node's pods being known by the interfaces that lead to one
//!    address alone, as their veths do in a capture of every interface. A question the node
//!    sends off through it and that comes back through it went round other nodes.
//!
//! Rules c and d name namespaces after each packet's addresses, so the point depends on the
//! packet, not only on its interface and direction. The capture-file source therefore places
//! every packet itself ([`Placement::place`]) and hands the pipeline placed packets, rather than
//! teaching the live [`crate::points::PointMap`] about addresses it never needs.
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
    time::{Duration, SystemTime},
};

// Keyed per process, and bounded (`MAX_HOSTS`, `MAX_MACS`, ...): a fast hash is enough, and
// every packet is placed by one lookup.
use foldhash::{HashMap, HashSet};

use dnsloop_shared::{
    parse::{
        classify, encapsulated_frame, DnsPorts, IpFamily, LinkLayer, PacketClass, SlicePacket,
    },
    point::Direction,
};

use super::{cooked::LOOPBACK_NAME, CaptureInterface, CapturedPacket};
use crate::{
    observation::{Namespace, Point},
    points::{DescriptionError, LinkDescription, LinkPoints, Role, NODE},
};

/// At most this many MACs per interface, and addresses per MAC, are counted: enough to tell a
/// router from a pod, and bounded whatever the file holds.
const MAX_MACS: usize = 4096;
const MAX_ADDRESSES_PER_MAC: usize = 256;
/// The namespaces named after addresses (rule c) are kept for this many addresses, so that a
/// packet does not build its names anew; past it they are built again, whatever the file holds.
const MAX_HOSTS: usize = 4096;

/// Bridges as common CNIs and container runtimes name them.
const BRIDGE_NAMES: [&str; 6] = ["cni0", "cbr0", "docker0", "kube-bridge", "weave", "lxcbr0"];
const BRIDGE_PREFIXES: [&str; 2] = ["br-", "virbr"];
/// The node ends of pod veths as common CNIs name them: the bridge plugin, flannel, kindnet and
/// docker (`veth`), Calico (`cali`), Cilium (`lxc`), the AWS VPC CNI (`eni`), GKE (`gke`) and
/// Azure CNI (`azv`).
const VETH_PREFIXES: [&str; 6] = ["veth", "cali", "lxc", "eni", "gke", "azv"];

/// The role a node interface's name suggests (rule b). `with_bridge`: the capture also holds
/// a bridge's own interface, so veths are taken to be its ports.
pub fn role_of_name(name: &str, with_bridge: bool) -> Role {
    if name == LOOPBACK_NAME {
        Role::Loopback
    } else if is_bridge_name(name) {
        Role::BridgeMaster
    } else if VETH_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
        Role::Veth {
            bridged: with_bridge,
        }
    } else {
        Role::Other { bridged: false }
    }
}

fn is_bridge_name(name: &str) -> bool {
    BRIDGE_NAMES.contains(&name)
        || BRIDGE_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// What a first reading of the whole file learns for placing and ordering its packets.
#[derive(Debug, Default)]
pub struct Survey {
    /// Per interface, the IP addresses each unicast MAC fronts in DNS frames whose direction the
    /// file does not record: the source address of frames it sends, the destination of frames
    /// sent to it.
    fronting: HashMap<u32, HashMap<[u8; 6], HashSet<IpAddr>>>,
    /// Per interface, the addresses beyond it in DNS packets whose direction the file records:
    /// the source of those coming in, the destination of those going out (rule e).
    beyond: HashMap<u32, Beyond>,
    /// Interfaces that carried DNS inside VXLAN or Geneve: a node's underlay.
    underlays: HashSet<u32>,
    newest: Option<SystemTime>,
    /// The most any packet's timestamp is behind one before it in the file.
    pub disorder: Duration,
}

impl Survey {
    pub fn observe(&mut self, captured: &CapturedPacket, ports: &DnsPorts) {
        let packet = &captured.packet;
        match self.newest {
            Some(newest) if packet.ts < newest => {
                let behind = newest.duration_since(packet.ts).unwrap_or_default();
                self.disorder = self.disorder.max(behind);
            }
            _ => self.newest = Some(packet.ts),
        }
        let interface = packet.seen.interface.ifindex;
        if let Some(direction) = captured.direction {
            self.note_beyond(interface, direction, packet, ports);
            return;
        }
        if packet.link_layer != LinkLayer::Ethernet {
            return;
        }
        let (Some((destination, source)), Some((from, to))) =
            (macs(&packet.bytes), addresses(packet, ports))
        else {
            return;
        };
        let macs = self
            .fronting
            .entry(packet.seen.interface.ifindex)
            .or_default();
        for (mac, address) in [(source, from), (destination, to)] {
            if is_group(&mac) || (!macs.contains_key(&mac) && macs.len() >= MAX_MACS) {
                continue;
            }
            let fronted = macs.entry(mac).or_default();
            if fronted.len() < MAX_ADDRESSES_PER_MAC {
                fronted.insert(address);
            }
        }
    }

    /// Notes where a DNS packet seen on `interface` going `direction` came from or went to, or
    /// that it carried DNS in a tunnel.
    fn note_beyond(
        &mut self,
        interface: u32,
        direction: Direction,
        packet: &crate::source::RawPacket,
        ports: &DnsPorts,
    ) {
        let Some((from, to)) = addresses(packet, ports) else {
            if carries_tunnelled_dns(packet, ports) {
                self.underlays.insert(interface);
            }
            return;
        };
        let address = match direction {
            Direction::Ingress => from,
            Direction::Egress => to,
        };
        // Every namespace has its loopback: it tells no pod from another.
        if address.is_loopback() {
            return;
        }
        let beyond = self.beyond.entry(interface).or_default();
        // A pod's veth, and an interface between two hosts, carries one address after another:
        // each once is enough.
        if beyond.last == Some(address) {
            return;
        }
        beyond.last = Some(address);
        if beyond.addresses.len() < MAX_ADDRESSES_PER_MAC {
            beyond.addresses.insert(address);
        }
    }

    /// Whether interface `index` leads off the node (rule e): it carries DNS in a tunnel, or
    /// to or from an address that is not a pod of this node's, where this node's pods are
    /// known by the interfaces that lead to one address alone, as a pod's veth does.
    fn leads_off_node(&self, index: u32) -> bool {
        if self.underlays.contains(&index) {
            return true;
        }
        let pods: HashSet<&IpAddr> = self
            .beyond
            .values()
            .filter(|beyond| beyond.addresses.len() == 1)
            .flat_map(|beyond| &beyond.addresses)
            .collect();
        !pods.is_empty()
            && self.beyond.get(&index).is_some_and(|beyond| {
                beyond
                    .addresses
                    .iter()
                    .any(|address| !pods.contains(address))
            })
    }

    /// The MAC of the node's side of interface `index` (rule d): the one fronting the most
    /// addresses, at least two, and more than any other.
    fn node_mac(&self, index: u32) -> Option<[u8; 6]> {
        let macs = self.fronting.get(&index)?;
        let mut counts: Vec<([u8; 6], usize)> = macs
            .iter()
            .map(|(mac, fronted)| (*mac, fronted.len()))
            .collect();
        counts.sort_by_key(|&(mac, count)| (std::cmp::Reverse(count), mac));
        match counts.as_slice() {
            [(mac, most), rest @ ..] if *most >= 2 && rest.first().is_none_or(|r| r.1 < *most) => {
                Some(*mac)
            }
            _ => None,
        }
    }
}

/// The addresses beyond one interface (rule e), and the latest.
#[derive(Debug, Default)]
struct Beyond {
    addresses: HashSet<IpAddr>,
    last: Option<IpAddr>,
}

/// How one interface's packets are placed.
#[derive(Debug)]
struct InterfacePlacement {
    name: Arc<str>,
    /// Its points when its role is known (rules a and b).
    known: Option<(Role, LinkPoints)>,
    /// How its role was learnt, for the summary.
    how: &'static str,
    /// The MAC of the node's side, for frames whose direction the file does not record.
    node_mac: Option<[u8; 6]>,
}

/// Places the packets of one capture file.
pub struct Placement {
    interfaces: Vec<InterfacePlacement>,
    ports: DnsPorts,
    node: Namespace,
    hosts: HashMap<IpAddr, Namespace>,
    /// The points placed by addresses (rule c), by interface, direction and the addresses
    /// that placed them: one for every packet placed alike, as live. As many as `hosts`.
    placed: HashMap<PlacedBy, Arc<Point>>,
}

/// What places a packet by its addresses: its interface, its direction if known, and the
/// addresses that name namespaces (none on a packet without them).
type PlacedBy = (
    u32,
    Option<Direction>,
    Option<(Option<IpAddr>, Option<IpAddr>)>,
);

impl Placement {
    /// `interfaces`: every interface of the file, as it lists them once read through; `ports`:
    /// those that carry DNS.
    pub fn new(interfaces: &[CaptureInterface], survey: &Survey, ports: DnsPorts) -> Self {
        let with_bridge = interfaces
            .iter()
            .any(|interface| interface.name.as_deref().is_some_and(is_bridge_name));
        let interfaces = interfaces
            .iter()
            .enumerate()
            .map(|(index, interface)| {
                let name = interface.display_name(index);
                let described = interface.description.as_deref().and_then(|text| {
                    text.parse::<LinkDescription>()
                        .inspect_err(|error| {
                            if *error != DescriptionError::Foreign {
                                tracing::warn!(
                                    "interface {name}'s description `{text}` is ignored: {error}"
                                );
                            }
                        })
                        .ok()
                });
                let (known, how) = match (described, &interface.name) {
                    (Some(described), _) => (
                        Some((described.role, described.points(&name))),
                        "description",
                    ),
                    (None, Some(own)) => {
                        let described = LinkDescription {
                            role: role_of_name(own, with_bridge),
                            namespace: None,
                            gateway: None,
                        };
                        (Some((described.role, described.points(own))), "name")
                    }
                    (None, None) => (None, "addresses"),
                };
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                let (known, how) = match known {
                    None if survey.leads_off_node(index) => {
                        let off_node = LinkDescription {
                            role: Role::Other { bridged: false },
                            namespace: None,
                            gateway: None,
                        };
                        (Some((off_node.role, off_node.points(&name))), "traffic")
                    }
                    known => (known, how),
                };
                InterfacePlacement {
                    name: name.into(),
                    known,
                    how,
                    node_mac: survey.node_mac(index),
                }
            })
            .collect();
        Self {
            interfaces,
            ports,
            node: Namespace::new(NODE),
            hosts: HashMap::default(),
            placed: HashMap::default(),
        }
    }

    /// Each interface's name, how its role was learnt (`description`, `name`, `addresses`)
    /// and, when MACs told directions, the node side's MAC.
    pub fn describe(&self) -> impl Iterator<Item = (&str, &'static str, Option<String>)> {
        self.interfaces.iter().map(|interface| {
            let mac = interface.node_mac.map(|mac| {
                mac.iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            });
            (interface.name.as_ref(), interface.how, mac)
        })
    }

    /// The namespace a capture knows only by one of its addresses.
    fn host(&mut self, address: IpAddr) -> Namespace {
        if self.hosts.len() >= MAX_HOSTS && !self.hosts.contains_key(&address) {
            self.hosts.clear();
        }
        self.hosts
            .entry(address)
            .or_insert_with(|| Namespace::new(&format!("host {address}")))
            .clone()
    }

    /// Where `captured` was seen; `None` for a packet of an interface the file did not list.
    pub fn place(&mut self, captured: &CapturedPacket) -> Option<Arc<Point>> {
        let packet = &captured.packet;
        let interface = self
            .interfaces
            .get(usize::try_from(packet.seen.interface.ifindex).ok()?)?;
        let direction = captured.direction.or_else(|| {
            let node = interface.node_mac?;
            let (destination, source) = macs(&packet.bytes)?;
            if source == node {
                Some(Direction::Egress)
            } else if destination == node {
                Some(Direction::Ingress)
            } else {
                None
            }
        });
        if let Some((role, points)) = &interface.known {
            match (role, direction) {
                // A loopback's packets leave and enter its namespace either way: both its
                // points say so.
                (Role::Loopback, direction) => {
                    return Some(Arc::clone(
                        points.get(direction.unwrap_or(Direction::Ingress), false),
                    ))
                }
                (_, Some(direction)) => {
                    let via_gateway = points.via_gateway(direction, &packet.bytes);
                    return Some(Arc::clone(points.get(direction, via_gateway)));
                }
                (_, None) => {}
            }
        }
        // Only the addresses that name a namespace here tell the points apart.
        let addresses = match (direction, addresses(packet, &self.ports)) {
            (_, None) => None,
            (Some(Direction::Ingress), Some((from, _))) => Some((Some(from), None)),
            (Some(Direction::Egress), Some((_, to))) => Some((None, Some(to))),
            (None, Some((from, to))) => Some((Some(from), Some(to))),
        };
        let key = (packet.seen.interface.ifindex, direction, addresses);
        if let Some(point) = self.placed.get(&key) {
            return Some(Arc::clone(point));
        }
        let ifname = interface.name.clone();
        let (leaves, enters) = match (direction, addresses) {
            (Some(Direction::Ingress), Some((Some(from), _))) => {
                (Some(self.host(from)), Some(self.node.clone()))
            }
            (Some(Direction::Egress), Some((_, Some(to)))) => {
                (Some(self.node.clone()), Some(self.host(to)))
            }
            (None, Some((Some(from), Some(to)))) => (Some(self.host(from)), Some(self.host(to))),
            _ => (None, None),
        };
        let point = Arc::new(Point {
            ifname,
            direction: direction.unwrap_or(Direction::Ingress),
            leaves,
            enters,
        });
        if self.placed.len() >= MAX_HOSTS {
            self.placed.clear();
        }
        self.placed.insert(key, Arc::clone(&point));
        Some(point)
    }
}

/// Whether `packet` carries DNS inside VXLAN or Geneve.
fn carries_tunnelled_dns(packet: &crate::source::RawPacket, ports: &DnsPorts) -> bool {
    let outer = SlicePacket(&packet.bytes);
    encapsulated_frame(&outer, packet.link_layer)
        .and_then(|inner| inner.frame(&packet.bytes))
        .is_some_and(|frame| {
            matches!(
                classify(&SlicePacket(frame), LinkLayer::Ethernet, ports),
                PacketClass::Dns(_)
            )
        })
}

/// The destination and source MACs of an Ethernet frame.
fn macs(frame: &[u8]) -> Option<([u8; 6], [u8; 6])> {
    let destination = frame.get(0..6)?.try_into().ok()?;
    let source = frame.get(6..12)?.try_into().ok()?;
    Some((destination, source))
}

/// Broadcast and multicast MACs front no one.
fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 1
}

/// The source and destination addresses of a DNS packet.
fn addresses(packet: &crate::source::RawPacket, ports: &DnsPorts) -> Option<(IpAddr, IpAddr)> {
    let PacketClass::Dns(segment) = classify(&SlicePacket(&packet.bytes), packet.link_layer, ports)
    else {
        return None;
    };
    let ip = |bytes: [u8; 16]| match segment.family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(bytes)),
    };
    Some((ip(segment.src), ip(segment.dst)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_past_the_memo_s_bound_are_still_named_and_memory_stays_bounded() {
        let mut placement = Placement::new(&[], &Survey::default(), DnsPorts::new(&[53]));
        for n in 0..MAX_HOSTS as u32 + 100 {
            let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
            assert_eq!(
                placement.host(address).0.as_ref(),
                format!("host {address}")
            );
            assert!(placement.hosts.len() <= MAX_HOSTS);
        }
        let first = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(placement.host(first).0.as_ref(), "host 10.0.0.0");
    }
}
