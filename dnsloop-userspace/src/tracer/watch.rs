//! The node as it is being watched: its links, the programs attached to them and to its pods'
//! loopbacks, and where each observation point sits. Kept current as links come and go.
use std::{collections::HashMap, net::IpAddr, time::Instant};

use anyhow::Context as _;
use aya::Ebpf;

use dnsloop_shared::point::{Direction, ObservationPoint, POINT_CANDIDATES, POINT_SLOTS};

use crate::{
    kernel::attach::{AttachError, Attachments},
    kernel::point_table::PointTable,
    kernel::programs,
    node::namespaces::{self, AwaitingNames, PodNamespace},
    node::pods::PodNames,
    node::topology::{Link, LinkEvent, LinkRole},
};
use dnsloop_core::{
    observation::{DropPlace, Namespace},
    points::{InterfaceRef, LinkDescription, PointMap, Role, LOOPBACK_INDEX, NODE},
};
use dnsloop_shared::parse::LinkLayer;

pub struct Watch {
    ebpf: Ebpf,
    links: Vec<Link>,
    /// Every bridge of the namespace, watched or not: a port of one that is not watched sees
    /// the frames the node routes to and from it (see `points`).
    bridges: Vec<Link>,
    points: PointMap,
    /// Cookie of the node's namespace, which tags its loopback's records.
    node_cookie: u64,
    attachments: Attachments,
    /// Where the programs find each point of `points`.
    point_table: PointTable,
    /// Whole-node mode: pods' loopbacks are watched too, and new links are followed.
    whole_node: bool,
    /// Names the pods found behind the node's veths.
    pod_names: PodNames,
    awaiting_names: AwaitingNames,
    watched_pods: Vec<String>,
    warned_pod_loopbacks: bool,
    /// The namespaces behind the node's veths, by cookie, with the veth: what names the place
    /// of a drop in one.
    pod_namespaces: HashMap<u64, (u32, Namespace)>,
}

impl Watch {
    /// Attaches the programs to `links`; with `whole_node`, also to the loopback of every pod
    /// behind them, which `pod_names` names. `bridges` are every bridge of the namespace.
    ///
    /// With `whole_node`, a bridge's own interface is left out: what crosses between its ports
    /// and the node is seen once, at the ports.
    pub fn start(
        ebpf: Ebpf,
        links: Vec<Link>,
        bridges: Vec<Link>,
        whole_node: bool,
        pod_names: PodNames,
        xdp_ingress: bool,
    ) -> anyhow::Result<Self> {
        let node_cookie = namespaces::current_cookie().context(
            "reading this network namespace's cookie (SO_NETNS_COOKIE needs Linux 5.14)",
        )?;
        let point_table = PointTable::read(&ebpf)?;
        let mut watch = Self {
            ebpf,
            links: Vec::new(),
            bridges,
            points: PointMap::default(),
            node_cookie,
            attachments: Attachments::new(xdp_ingress),
            point_table,
            whole_node,
            pod_names,
            awaiting_names: AwaitingNames::default(),
            watched_pods: Vec::new(),
            warned_pod_loopbacks: false,
            pod_namespaces: HashMap::new(),
        };
        watch
            .points
            .insert_loopback(node_cookie, Namespace::new(NODE));
        watch.add(links)?;
        // Frees the slots of what went away while attaching.
        watch.sync_points()?;
        Ok(watch)
    }

    /// Records every address the node holds, as `held` lists them with their links: from
    /// then on, `points` tells whether a packet entering the node can be delivered there.
    pub fn hold_addresses(&mut self, held: Vec<(u32, IpAddr)>) {
        let node = Namespace::new(NODE);
        for (index, address) in held {
            self.points.add_address(&node, index, address);
        }
    }

    /// Whether the classifiers attach through tc clsact (no TCX).
    pub fn on_clsact(&self) -> bool {
        self.attachments.on_clsact()
    }

    /// The loaded programs, whose maps hold what they counted.
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The links watched.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Where each watched point sits: what places the packets seen there.
    pub fn points(&self) -> &PointMap {
        &self.points
    }

    /// Cookie of the node's namespace, which tags its loopback's records.
    pub fn node_cookie(&self) -> u64 {
        self.node_cookie
    }

    /// Where the kernel dropped a packet on `device`: the node or a pod found behind its veths,
    /// and the device's name when the node's (`if<index>` in a pod, whose devices are not
    /// listed).
    pub fn drop_place(&self, device: InterfaceRef) -> DropPlace {
        let InterfaceRef {
            netns_cookie,
            ifindex,
        } = device;
        let (namespace, name) = if netns_cookie == self.node_cookie {
            let name = self
                .links
                .iter()
                .chain(&self.bridges)
                .find(|link| link.index == ifindex)
                .map(|link| link.name.clone());
            (Some(Namespace::new(NODE)), name)
        } else {
            let namespace = self
                .pod_namespaces
                .get(&netns_cookie)
                .map(|(_, namespace)| namespace.clone());
            (namespace, None)
        };
        let device = match (ifindex, name) {
            (0, _) => None,
            (_, Some(name)) => Some(name.into()),
            (LOOPBACK_INDEX, None) => Some("lo".into()),
            (index, None) => Some(format!("if{index}").into()),
        };
        DropPlace { namespace, device }
    }

    /// Notes the namespace of `pod`, named as it is now, and the addresses it holds.
    fn note_pod(&mut self, pod: &PodNamespace) {
        let namespace = Namespace::new(&pod.label);
        let named_before = self
            .pod_namespaces
            .insert(pod.cookie, (pod.node_veth, namespace.clone()));
        if let Some((_, before)) = named_before {
            self.points.forget_addresses(&before);
        }
        for &(index, address) in &pod.addresses {
            self.points.add_address(&namespace, index, address);
        }
    }

    /// `watching 7 interface(s): lo eth0 ...; bridge cni0 at its ports; lo of pod 10.244.0.3, ...`
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.links.iter().map(|link| link.name.as_str()).collect();
        let mut text = format!("watching {} interface(s): {}", names.len(), names.join(" "));
        // Bridges seen at their ports: not watched themselves, with a port that is.
        let at_ports: Vec<&str> = self
            .bridges
            .iter()
            .filter(|bridge| {
                self.links.iter().any(|link| {
                    self.gateway_of(link).is_some() && link.controller == Some(bridge.index)
                })
            })
            .map(|bridge| bridge.name.as_str())
            .collect();
        if !at_ports.is_empty() {
            text.push_str(&format!("; bridge {} at its ports", at_ports.join(" ")));
        }
        if !self.watched_pods.is_empty() {
            text.push_str(&format!("; lo of {}", self.watched_pods.join(", ")));
        }
        text
    }

    /// Follows a change of the node's addresses, and of its links in whole-node mode.
    pub fn apply(&mut self, event: LinkEvent) {
        // What the node holds tells a query delivered to it from one routed through or held,
        // whatever is watched.
        let node = Namespace::new(NODE);
        match event {
            LinkEvent::AddressAdded { index, address } => {
                self.points.add_address(&node, index, address)
            }
            LinkEvent::AddressRemoved { index, address } => {
                self.points.remove_address(&node, index, address)
            }
            LinkEvent::Added(link) if self.whole_node => {
                self.link_added(link);
                self.sync_points_or_warn();
            }
            LinkEvent::Removed { index } if self.whole_node => {
                self.link_removed(index);
                self.sync_points_or_warn();
            }
            LinkEvent::Added(_) | LinkEvent::Removed { .. } => {}
        }
    }

    fn link_added(&mut self, link: Link) {
        match link {
            link if link.role == LinkRole::BridgeMaster => self.bridge_changed(link),
            link if !self.attachments.is_attached(link.index) => {
                let name = link.name.clone();
                match self.add(vec![link]) {
                    Ok(()) => tracing::info!("now watching {name}"),
                    // It may be gone already, or not up yet: its traffic is seen elsewhere too.
                    Err(error) => tracing::warn!("not watching new interface {name}: {error:#}"),
                }
            }
            // A CNI creates a pod's veth, then puts it on the bridge: place it again.
            link => self.update(link),
        }
    }

    fn link_removed(&mut self, index: u32) {
        self.bridges.retain(|bridge| bridge.index != index);
        let points = &mut self.points;
        self.pod_namespaces.retain(|_, (veth, namespace)| {
            let gone = *veth == index;
            if gone {
                points.forget_addresses(namespace);
            }
            !gone
        });
        self.awaiting_names.forget(index);
        self.attachments.forget(index);
        self.points.remove_link(index);
        self.links.retain(|link| link.index != index);
    }

    fn sync_points_or_warn(&mut self) {
        if let Err(error) = self.sync_points() {
            tracing::warn!("telling the programs where namespaces are: {error:#}");
        }
    }

    /// Tells the kernel programs every watched point (see `PointMap::kernel_points`). Returns
    /// the points the point table had no room for.
    fn sync_points(&mut self) -> anyhow::Result<Vec<ObservationPoint>> {
        let points = self.points.kernel_points();
        let unplaced = self.point_table.sync(&mut self.ebpf, &points)?;
        Ok(unplaced)
    }

    /// A known link changed: if what it connects did, re-place its points.
    fn update(&mut self, link: Link) {
        let Some(at) = self
            .links
            .iter()
            .position(|known| known.index == link.index)
        else {
            return;
        };
        let known = &self.links[at];
        if known.role == link.role && known.name == link.name && known.controller == link.controller
        {
            return;
        }
        let pods = namespaces::discover(std::slice::from_ref(&link), &self.pod_names);
        let gateway = self.gateway_of(&link);
        place_link(&mut self.points, &link, &pods, gateway);
        self.links[at] = link;
        for pod in &pods {
            self.points
                .rename_loopback(pod.cookie, Namespace::new(&pod.label));
            self.awaiting_names.add(pod, Instant::now());
            self.note_pod(pod);
        }
    }

    /// Whether some pod is still named by address while its name may yet be found.
    pub fn awaits_pod_names(&self) -> bool {
        !self.awaiting_names.is_empty()
    }

    /// Names the pods that were named by address when found, if their names are known now.
    pub fn name_new_pods(&mut self) {
        let mut renamed = false;
        for pod in self.awaiting_names.named(&self.pod_names, Instant::now()) {
            let Some(link) = self.links.iter().find(|link| link.index == pod.node_veth) else {
                continue;
            };
            tracing::info!("the namespace behind {} is {}", link.name, pod.label);
            let gateway = self.gateway_of(link);
            place_link(&mut self.points, link, std::slice::from_ref(&pod), gateway);
            self.points
                .rename_loopback(pod.cookie, Namespace::new(&pod.label));
            self.note_pod(&pod);
            renamed = true;
        }
        // The kernel follows questions by namespace: a renamed one is numbered anew.
        if renamed {
            if let Err(error) = self.sync_points() {
                tracing::warn!("telling the programs where namespaces are: {error:#}");
            }
        }
    }

    fn add(&mut self, links: Vec<Link>) -> anyhow::Result<()> {
        let links: Vec<Link> = if self.whole_node {
            links
                .into_iter()
                .filter(|link| link.role != LinkRole::BridgeMaster)
                .collect()
        } else {
            links
        };
        let pods = if self.whole_node {
            namespaces::discover(&links, &self.pod_names)
        } else {
            Vec::new()
        };
        for link in &links {
            let gateway = self.gateway_of_port(link, &links);
            place_link(&mut self.points, link, &pods, gateway);
        }
        let pod_loopbacks = !pods.is_empty() && programs::tc_knows_netns_cookie();
        if pod_loopbacks {
            for pod in &pods {
                self.points
                    .insert_loopback(pod.cookie, Namespace::new(&pod.label));
            }
        }
        // Placed before attaching, so that their first packets are counted and followed.
        let unplaced = self.sync_points()?;
        if let Err(refused) = check_unplaced(&links, &unplaced) {
            for link in &links {
                self.points.remove_link(link.index);
            }
            for pod in &pods {
                self.points.remove_loopback(pod.cookie);
            }
            self.sync_points()?;
            return Err(refused);
        }
        let mut attached = Vec::with_capacity(links.len());
        for link in links {
            match self.attachments.attach(&mut self.ebpf, &link) {
                Ok(()) => attached.push(link),
                // The whole node is what exists: a pod's veth may go while dnsloop starts.
                Err(AttachError::InterfaceGone(name)) if self.whole_node => {
                    tracing::info!("{name} went away before it could be watched");
                    self.points.remove_link(link.index);
                }
                Err(error) => return Err(error.into()),
            }
        }
        if pod_loopbacks {
            for pod in &pods {
                self.watch_pod_loopback(pod);
            }
        } else if !pods.is_empty() {
            self.warn_pod_loopbacks_unwatched();
        }
        for pod in &pods {
            self.awaiting_names.add(pod, Instant::now());
            self.note_pod(pod);
        }
        self.links.extend(attached);
        Ok(())
    }

    /// The MAC of the bridge `link` is a port of, if that bridge is not watched (neither now nor
    /// among `attaching`): frames to and from it are then placed at the port.
    fn gateway_of_port(&self, link: &Link, attaching: &[Link]) -> Option<[u8; 6]> {
        let bridge = link.controller?;
        let watched = |links: &[Link]| links.iter().any(|known| known.index == bridge);
        if watched(&self.links) || watched(attaching) {
            return None;
        }
        self.gateway_of_bridge(bridge)
    }

    /// As `gateway_of_port`, for a link placed while no others are being attached.
    fn gateway_of(&self, link: &Link) -> Option<[u8; 6]> {
        self.gateway_of_port(link, &[])
    }

    fn gateway_of_bridge(&self, index: u32) -> Option<[u8; 6]> {
        self.bridges
            .iter()
            .find(|bridge| bridge.index == index)
            .and_then(|bridge| bridge.mac)
    }

    /// A bridge appeared or changed (its MAC follows its ports' unless set): its watched ports
    /// are placed again with its new MAC.
    fn bridge_changed(&mut self, bridge: Link) {
        let index = bridge.index;
        match self.bridges.iter_mut().find(|known| known.index == index) {
            Some(known) if known.mac == bridge.mac => return,
            Some(known) => *known = bridge,
            None => self.bridges.push(bridge),
        }
        let ports: Vec<Link> = self
            .links
            .iter()
            .filter(|link| link.controller == Some(index))
            .cloned()
            .collect();
        for port in ports {
            let interface = InterfaceRef {
                netns_cookie: 0,
                ifindex: port.index,
            };
            let Some((_, described)) = self.points.link(interface) else {
                continue;
            };
            let description = LinkDescription {
                gateway: self.gateway_of(&port),
                ..described.clone()
            };
            self.points
                .insert_link(port.index, &port.name, description, link_layer(&port));
        }
    }

    /// The programs cannot tell one namespace's loopback from another's here: say once what
    /// goes unseen.
    fn warn_pod_loopbacks_unwatched(&mut self) {
        if !std::mem::replace(&mut self.warned_pod_loopbacks, true) {
            eprintln!("dnsloop: pods' loopbacks are not watched: this kernel's TC programs cannot tell network namespaces apart (bpf_get_netns_cookie reached them in Linux 6.13), so a server in a pod forwarding to itself over its loopback goes unseen");
        }
    }

    /// A server forwarding to itself over its loopback shows nowhere else.
    fn watch_pod_loopback(&mut self, pod: &PodNamespace) {
        let attached =
            self.attachments
                .attach_pod_loopback(&mut self.ebpf, &pod.path, pod.cookie, &pod.label);
        match attached {
            Ok(()) => self.watched_pods.push(pod.label.clone()),
            // The pod may be going away; the node's own interfaces still see its traffic.
            Err(error) => {
                tracing::warn!("not watching lo of {}: {error}", pod.label);
                self.points.remove_loopback(pod.cookie);
            }
        }
    }
}

/// Refuses `links` if the point table had no room for a point of one without Ethernet, whose
/// packets the programs would misread; says what else goes uncounted.
fn check_unplaced(links: &[Link], unplaced: &[ObservationPoint]) -> anyhow::Result<()> {
    for point in unplaced {
        let link = links
            .iter()
            .find(|link| point.netns_cookie == 0 && link.index == point.ifindex);
        if let Some(link) = link.filter(|link| !link.ethernet) {
            anyhow::bail!(
                "interface {} carries no Ethernet header, and the point table has no room for it where the programs look ({POINT_SLOTS} slots, {POINT_CANDIDATES} searched a point): its packets would be misread, so name the interfaces to watch with -i, leaving it out",
                link.name
            );
        }
        let name = link.map_or("lo", |link| link.name.as_str());
        let direction = Direction::from_u8(point.direction).map_or("", Direction::as_str);
        eprintln!("dnsloop: the point table has no room for {name} {direction} (namespace cookie {}): its packets are parsed, but counted only as unplaced_packets, and loops through it are not followed", point.netns_cookie);
    }
    Ok(())
}
/// Places `link` of the node namespace, whose veth, if it is one, leads to one of `pods`; a veth
/// whose far end was not found is named after itself (`pod@veth-coredns-a`). `gateway`: the MAC
/// of its bridge, if it is a port of one that is not watched.
fn place_link(points: &mut PointMap, link: &Link, pods: &[PodNamespace], gateway: Option<[u8; 6]>) {
    points.insert_link(
        link.index,
        &link.name,
        describe(link, pods, gateway),
        link_layer(link),
    );
}

/// How a saved capture describes `link`, and so where its packets are placed.
fn describe(link: &Link, pods: &[PodNamespace], gateway: Option<[u8; 6]>) -> LinkDescription {
    let role = Role::from(&link.role);
    let namespace = match role {
        Role::Loopback => Some(Namespace::new(NODE)),
        Role::Veth { .. } => pods
            .iter()
            .find(|pod| pod.node_veth == link.index)
            .map(|pod| Namespace::new(&pod.label)),
        Role::BridgeMaster | Role::Other { .. } => None,
    };
    LinkDescription {
        role,
        namespace,
        gateway,
    }
}

fn link_layer(link: &Link) -> LinkLayer {
    if link.ethernet {
        LinkLayer::Ethernet
    } else {
        LinkLayer::RawIp
    }
}

#[cfg(test)]
mod tests {
    use dnsloop_core::points::{InterfaceRef, Seen};
    use dnsloop_shared::point::Direction;

    use super::*;

    #[test]
    fn a_described_link_is_placed_as_live() {
        let bridge_mac = [0x02, 0x42, 0x0a, 0xf4, 0x00, 0x01];
        let link = Link {
            index: 7,
            name: "veth-coredns-a".into(),
            role: LinkRole::Veth {
                peer_netns_id: 1,
                peer_index: 2,
                bridged: true,
            },
            ethernet: true,
            mac: Some([0x02, 0, 0, 0, 0, 0x07]),
            controller: Some(3),
        };
        let pod = PodNamespace {
            node_veth: 7,
            path: "/run/netns/coredns-a".into(),
            label: "pod 10.244.0.3".into(),
            cookie: 42,
            inode: 4026532301,
            pod: None,
            addresses: Vec::new(),
        };
        let mut live = PointMap::default();
        place_link(
            &mut live,
            &link,
            std::slice::from_ref(&pod),
            Some(bridge_mac),
        );
        let described = LinkDescription {
            role: Role::Veth { bridged: true },
            namespace: Some(Namespace::new("pod 10.244.0.3")),
            gateway: Some(bridge_mac),
        };
        let points = described.points(&link.name);
        for direction in [Direction::Ingress, Direction::Egress] {
            for via_gateway in [false, true] {
                let seen = Seen {
                    interface: InterfaceRef {
                        netns_cookie: 0,
                        ifindex: 7,
                    },
                    direction,
                    via_gateway,
                };
                assert_eq!(live.get(seen), Some(points.get(direction, via_gateway)));
            }
        }
    }
}
