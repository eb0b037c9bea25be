//! Where each observation point sits: the namespaces a packet leaves and enters there.
use std::{collections::HashMap, sync::Arc};

use dnsloop_ebpf::event::Direction;

use crate::{
    namespaces::PodNamespace,
    observation::{Namespace, Point},
    source::InterfaceRef,
    topology::{Link, LinkRole},
};

/// The namespace the tracer runs in: on a node, the host's.
pub const NODE: &str = "node";

/// Resolves the interface and direction of a raw packet to a [`Point`].
#[derive(Default)]
pub struct PointMap {
    points: HashMap<(InterfaceRef, Direction), Point>,
}

impl PointMap {
    /// Registers `link` of the node namespace, whose veth, if it is one, leads to one of `pods`;
    /// a veth whose far end was not found is named after itself (`pod@veth-coredns-a`).
    pub fn insert_link(&mut self, link: &Link, pods: &[PodNamespace]) {
        let node = Namespace::new(NODE);
        let far = pods
            .iter()
            .find(|pod| pod.node_veth == link.index)
            .map(|pod| Namespace::new(&pod.label))
            .unwrap_or_else(|| Namespace::new(&format!("pod@{}", link.name)));
        let interface = InterfaceRef {
            // The kernel tags loopback records with their namespace's cookie; the node's own
            // loopback is registered by `insert_loopback`.
            netns_cookie: 0,
            ifindex: link.index,
        };
        let name: Arc<str> = link.name.as_str().into();
        for direction in [Direction::Ingress, Direction::Egress] {
            let (leaves, enters) = crossing(&link.role, &node, &far, direction);
            self.points.insert(
                (interface, direction),
                Point {
                    ifname: name.clone(),
                    direction,
                    leaves,
                    enters,
                },
            );
        }
    }

    /// Forgets interface `index` of the node namespace.
    pub fn remove_link(&mut self, index: u32) {
        self.points
            .retain(|(interface, _), _| interface.netns_cookie != 0 || interface.ifindex != index);
    }

    /// Registers the loopback of the namespace with `netns_cookie`, named `namespace`.
    pub fn insert_loopback(&mut self, netns_cookie: u64, namespace: Namespace) {
        let interface = InterfaceRef {
            netns_cookie,
            ifindex: crate::attach::LOOPBACK_INDEX,
        };
        self.points.insert(
            (interface, Direction::Egress),
            Point {
                ifname: "lo".into(),
                direction: Direction::Egress,
                leaves: Some(namespace.clone()),
                enters: Some(namespace),
            },
        );
    }

    pub fn get(&self, interface: InterfaceRef, direction: Direction) -> Option<&Point> {
        self.points.get(&(interface, direction))
    }
}

/// Which namespaces a packet crossing a link of `role` in `direction` leaves and enters; `far`
/// is the namespace at the other end of a veth.
fn crossing(
    role: &LinkRole,
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
        LinkRole::Loopback => (Some(node.clone()), Some(node.clone())),
        // Between the bridge and the node's own stack.
        LinkRole::BridgeMaster | LinkRole::Other { bridged: false } => {
            if ingress {
                (None, Some(node.clone()))
            } else {
                (Some(node.clone()), None)
            }
        }
        // A bridge port: between the bridge and what is plugged into it.
        LinkRole::Veth { bridged: true, .. } => inside(far.clone()),
        LinkRole::Other { bridged: true } => (None, None),
        // A point-to-point veth: straight between the node and the far namespace.
        LinkRole::Veth { bridged: false, .. } => {
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

    fn names(crossing: (Option<Namespace>, Option<Namespace>)) -> (Option<String>, Option<String>) {
        (
            crossing.0.map(|namespace| namespace.to_string()),
            crossing.1.map(|namespace| namespace.to_string()),
        )
    }

    #[test]
    fn bridge_ports_lead_into_pods_and_the_bridge_into_the_node() {
        let (node, pod) = (Namespace::new(NODE), Namespace::new("pod 10.244.0.2"));
        let port = LinkRole::Veth {
            peer_netns_id: 1,
            peer_index: 3,
            bridged: true,
        };
        assert_eq!(
            names(crossing(&port, &node, &pod, Direction::Ingress)),
            (Some("pod 10.244.0.2".into()), None)
        );
        assert_eq!(
            names(crossing(&port, &node, &pod, Direction::Egress)),
            (None, Some("pod 10.244.0.2".into()))
        );
        let bridge = LinkRole::BridgeMaster;
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
        let uplink = LinkRole::Veth {
            peer_netns_id: 2,
            peer_index: 5,
            bridged: false,
        };
        assert_eq!(
            names(crossing(&uplink, &node, &far, Direction::Egress)),
            (Some("node".into()), Some("pod 10.255.0.53".into()))
        );
        let physical = LinkRole::Other { bridged: false };
        assert_eq!(
            names(crossing(&physical, &node, &far, Direction::Egress)),
            (Some("node".into()), None)
        );
    }
}
