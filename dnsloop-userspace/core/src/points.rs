//! Where each observation point sits: the namespaces a packet leaves and enters there.
//!
//! Live, a link's [`Role`] comes from rtnetlink; in a capture dnsloop wrote, from the
//! interface's description ([`LinkDescription`]), so both place a packet at the same point.
use std::{collections::HashMap, fmt, str::FromStr, sync::Arc};

use dnsloop_ebpf::{
    parse::LinkLayer,
    point::{Direction, ObservationPoint, PointNamespaces},
};

use crate::{
    observation::{Namespace, Point},
    source::InterfaceRef,
};

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
}

/// Resolves the interface and direction of a raw packet to a [`Point`], and tells how each
/// interface is described in a saved capture.
#[derive(Default)]
pub struct PointMap {
    points: HashMap<(InterfaceRef, Direction), Point>,
    links: HashMap<InterfaceRef, (Arc<str>, LinkDescription, LinkLayer)>,
    /// The numbers the kernel programs know namespaces by (see `kernel_points`).
    namespace_numbers: HashMap<Namespace, u32>,
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
        let of_node_link =
            |interface: &InterfaceRef| interface.netns_cookie == 0 && interface.ifindex == index;
        self.points
            .retain(|(interface, _), _| !of_node_link(interface));
        self.links.retain(|interface, _| !of_node_link(interface));
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
        let interface = InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        };
        self.points.retain(|(known, _), _| *known != interface);
        self.links.remove(&interface);
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
        directions: &[Direction],
    ) {
        for point in description.points(ifname) {
            if directions.contains(&point.direction) {
                self.points.insert((interface, point.direction), point);
            }
        }
        self.links
            .insert(interface, (ifname.into(), description, link_layer));
    }

    pub fn get(&self, interface: InterfaceRef, direction: Direction) -> Option<&Point> {
        self.points.get(&(interface, direction))
    }

    /// Every watched point as the kernel programs need to know it: how its frames start, and,
    /// to follow a question from namespace to namespace, the namespaces its packets leave and
    /// enter, numbered from 1 (0: none). A namespace keeps its number while dnsloop runs.
    pub fn kernel_points(&mut self) -> Vec<KernelPoint> {
        let Self {
            points,
            links,
            namespace_numbers,
        } = self;
        let mut number = |namespace: &Option<Namespace>| match namespace {
            Some(namespace) => {
                let next = namespace_numbers.len() as u32 + 1;
                *namespace_numbers.entry(namespace.clone()).or_insert(next)
            }
            None => 0,
        };
        points
            .iter()
            .map(|((interface, direction), point)| {
                let key = ObservationPoint::new(
                    interface.netns_cookie,
                    interface.ifindex,
                    *direction as u8,
                );
                let namespaces = PointNamespaces {
                    leaves: number(&point.leaves),
                    enters: number(&point.enters),
                };
                let link_layer = links
                    .get(interface)
                    .map_or(LinkLayer::Ethernet, |(_, _, link_layer)| *link_layer);
                KernelPoint {
                    point: key,
                    namespaces,
                    link_layer,
                }
            })
            .collect()
    }

    /// The name and description of `interface`, as a saved capture records them.
    pub fn link(&self, interface: InterfaceRef) -> Option<(&str, &LinkDescription)> {
        self.links
            .get(&interface)
            .map(|(name, description, _)| (name.as_ref(), description))
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

/// An interface's role and the namespace it leads to, as `dnsloop` writes it into the
/// interface description (`if_description`) of the captures it saves, and reads it back, so
/// that analysing a saved capture places every packet where the live trace did.
///
/// The format, version 1, is one line of space-separated fields:
///
/// ```text
/// dnsloop/1 role=veth bridged=1 ns=pod 10.244.0.3
/// dnsloop/1 role=veth bridged=1 ns=pod kube-system/coredns-5d78c9869d-abcde
/// dnsloop/1 role=loopback ns=pod 10.244.0.3
/// dnsloop/1 role=bridge
/// dnsloop/1 role=other bridged=0
/// ```
///
/// `role` is `loopback`, `bridge` (a bridge's own interface), `veth` or `other`; `bridged`
/// (`0` or `1`, veth and other only) says whether the link is a bridge port; `ns`, always last
/// and running to the end of the line, names the namespace at the far end of a veth or the one
/// a loopback belongs to. A later, incompatible format gets a new version number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkDescription {
    pub role: Role,
    pub namespace: Option<Namespace>,
}

/// What starts every description in the format above.
const DESCRIPTION_VERSION: &str = "dnsloop/1";

impl LinkDescription {
    /// The points of interface `ifname` in both directions, ingress first: a veth whose far
    /// end is unnamed leads to `pod@<ifname>`, as live.
    pub fn points(&self, ifname: &str) -> [Point; 2] {
        let node = Namespace::new(NODE);
        let name: Arc<str> = ifname.into();
        let point = |direction| {
            let (leaves, enters) = match (&self.role, &self.namespace) {
                (Role::Loopback, Some(own)) => (Some(own.clone()), Some(own.clone())),
                (role, far) => {
                    let far = far
                        .clone()
                        .unwrap_or_else(|| Namespace::new(&format!("pod@{ifname}")));
                    crossing(role, &node, &far, direction)
                }
            };
            Point {
                ifname: name.clone(),
                direction,
                leaves,
                enters,
            }
        };
        [point(Direction::Ingress), point(Direction::Egress)]
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
        if let Some(namespace) = &self.namespace {
            write!(f, " ns={namespace}")?;
        }
        Ok(())
    }
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
        if version != DESCRIPTION_VERSION {
            return Err(DescriptionError::Version(version.into()));
        }
        let (mut role, mut bridged, mut namespace) = (None, false, None);
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
        Ok(Self { role, namespace })
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
        // A bridge port: between the bridge and what is plugged into it.
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
mod tests {
    use super::*;

    #[test]
    fn each_namespace_has_one_number_for_the_kernel() {
        let mut points = PointMap::default();
        points.insert_loopback(7, Namespace::new("pod 10.244.0.3"));
        let bridge = LinkDescription {
            role: Role::BridgeMaster,
            namespace: None,
        };
        points.insert_link(3, "cni0", bridge, LinkLayer::Ethernet);
        let numbered = points.kernel_points();
        let at = |cookie, ifindex, direction: Direction| {
            numbered
                .iter()
                .find(|placed| {
                    let point = placed.point;
                    (point.netns_cookie, point.ifindex, point.direction)
                        == (cookie, ifindex, direction as u8)
                })
                .map(|placed| placed.namespaces)
                .expect("a numbered point")
        };
        let pod_lo = at(7, 1, Direction::Egress);
        assert_eq!(
            pod_lo.leaves, pod_lo.enters,
            "loopback leaves and enters its pod"
        );
        assert_ne!(pod_lo.leaves, 0);
        let into_node = at(0, 3, Direction::Ingress);
        let out_of_node = at(0, 3, Direction::Egress);
        assert_eq!(
            (into_node.leaves, out_of_node.enters),
            (0, 0),
            "the bridge side"
        );
        assert_eq!(into_node.enters, out_of_node.leaves, "the node");
        assert_ne!(into_node.enters, pod_lo.leaves);
        assert_eq!(points.kernel_points().len(), numbered.len());
        assert_eq!(at(0, 3, Direction::Ingress), into_node, "numbers are kept");
    }

    fn names(crossing: (Option<Namespace>, Option<Namespace>)) -> (Option<String>, Option<String>) {
        (
            crossing.0.map(|namespace| namespace.to_string()),
            crossing.1.map(|namespace| namespace.to_string()),
        )
    }

    #[test]
    fn bridge_ports_lead_into_pods_and_the_bridge_into_the_node() {
        let (node, pod) = (Namespace::new(NODE), Namespace::new("pod 10.244.0.2"));
        let port = Role::Veth { bridged: true };
        assert_eq!(
            names(crossing(&port, &node, &pod, Direction::Ingress)),
            (Some("pod 10.244.0.2".into()), None)
        );
        assert_eq!(
            names(crossing(&port, &node, &pod, Direction::Egress)),
            (None, Some("pod 10.244.0.2".into()))
        );
        let bridge = Role::BridgeMaster;
        assert_eq!(
            names(crossing(&bridge, &node, &pod, Direction::Ingress)),
            (None, Some("node".into()))
        );
        assert_eq!(
            names(crossing(&bridge, &node, &pod, Direction::Egress)),
            (Some("node".into()), None)
        );
    }

    #[test]
    fn a_point_to_point_veth_joins_the_node_and_the_far_namespace() {
        let (node, far) = (Namespace::new(NODE), Namespace::new("pod 10.255.0.53"));
        let uplink = Role::Veth { bridged: false };
        assert_eq!(
            names(crossing(&uplink, &node, &far, Direction::Egress)),
            (Some("node".into()), Some("pod 10.255.0.53".into()))
        );
        let physical = Role::Other { bridged: false };
        assert_eq!(
            names(crossing(&physical, &node, &far, Direction::Egress)),
            (Some("node".into()), None)
        );
    }

    #[test]
    fn descriptions_read_back_as_written() {
        let descriptions = [
            LinkDescription {
                role: Role::Veth { bridged: true },
                namespace: Some(Namespace::new("pod 10.244.0.3")),
            },
            LinkDescription {
                role: Role::Loopback,
                namespace: Some(Namespace::new("pod 10.244.0.3")),
            },
            // A pod dnsloop named: the name runs to the end of the line.
            LinkDescription {
                role: Role::Veth { bridged: true },
                namespace: Some(Namespace::new("pod kube-system/coredns-5d78c9869d-abcde")),
            },
            LinkDescription {
                role: Role::BridgeMaster,
                namespace: None,
            },
            LinkDescription {
                role: Role::Other { bridged: false },
                namespace: None,
            },
        ];
        for description in descriptions {
            let text = description.to_string();
            assert_eq!(text.parse::<LinkDescription>(), Ok(description), "{text}");
        }
        assert_eq!(
            "dnsloop/1 role=veth bridged=1 ns=pod 10.244.0.3"
                .parse::<LinkDescription>()
                .map(|description| description.points("veth-a")[0].leaves.clone()),
            Ok(Some(Namespace::new("pod 10.244.0.3")))
        );
    }

    #[test]
    fn foreign_and_future_descriptions_are_refused() {
        let refused = |text: &str| text.parse::<LinkDescription>().unwrap_err();
        assert_eq!(refused("Intel(R) Ethernet"), DescriptionError::Foreign);
        assert_eq!(
            refused("dnsloop/2 role=veth"),
            DescriptionError::Version("dnsloop/2".into())
        );
        assert_eq!(
            refused("dnsloop/1 role=veth colour=red"),
            DescriptionError::Field("colour=red".into())
        );
        assert_eq!(refused("dnsloop/1 bridged=1"), DescriptionError::NoRole);
        assert_eq!(
            refused("dnsloop/1 role=tunnel"),
            DescriptionError::Field("role=tunnel".into())
        );
    }

    #[test]
    fn a_watched_loopback_takes_its_pods_name_and_no_other_appears() {
        let mut points = PointMap::default();
        points.insert_loopback(42, Namespace::new("pod 10.244.0.2"));
        points.rename_loopback(42, Namespace::new("pod default/client"));
        points.rename_loopback(43, Namespace::new("pod default/other"));
        let lo = |netns_cookie| InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        };
        let renamed = points
            .get(lo(42), Direction::Egress)
            .expect("still watched");
        assert_eq!(
            (renamed.leaves.clone(), renamed.enters.clone()),
            (
                Some(Namespace::new("pod default/client")),
                Some(Namespace::new("pod default/client"))
            )
        );
        assert_eq!(points.get(lo(43), Direction::Egress), None);
    }
}
