//! The node as it is being watched: its links, the programs attached to them and to its pods'
//! loopbacks, and where each observation point sits. Kept current as links come and go.
use std::time::Instant;

use anyhow::Context as _;
use aya::Ebpf;

use dnsloop_ebpf::point::{Direction, ObservationPoint, POINT_CANDIDATES, POINT_SLOTS};

use crate::{
    kernel::attach::{AttachError, Attachments},
    kernel::point_table::PointTable,
    kernel::programs,
    node::namespaces::{self, AwaitingNames, PodNamespace},
    node::pods::PodNames,
    node::topology::{Link, LinkEvent},
};
use dnsloop_core::{
    observation::Namespace,
    points::{LinkDescription, PointMap, Role, NODE},
};
use dnsloop_ebpf::parse::LinkLayer;

pub struct Watch {
    ebpf: Ebpf,
    links: Vec<Link>,
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
}

impl Watch {
    /// Attaches the programs to `links`; with `whole_node`, also to the loopback of every pod
    /// behind them, which `pod_names` names.
    pub fn start(
        ebpf: Ebpf,
        links: Vec<Link>,
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
            points: PointMap::default(),
            node_cookie,
            attachments: Attachments::new(xdp_ingress),
            point_table,
            whole_node,
            pod_names,
            awaiting_names: AwaitingNames::default(),
            watched_pods: Vec::new(),
            warned_pod_loopbacks: false,
        };
        watch
            .points
            .insert_loopback(node_cookie, Namespace::new(NODE));
        watch.add(links)?;
        // Frees the slots of what went away while attaching.
        watch.sync_points()?;
        Ok(watch)
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

    /// `watching 7 interface(s): lo cni0 ...; lo of pod 10.244.0.3, ...`
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.links.iter().map(|link| link.name.as_str()).collect();
        let mut text = format!("watching {} interface(s): {}", names.len(), names.join(" "));
        if !self.watched_pods.is_empty() {
            text.push_str(&format!("; lo of {}", self.watched_pods.join(", ")));
        }
        text
    }

    /// Follows a change of the node's links (whole-node mode only).
    pub fn apply(&mut self, event: LinkEvent) {
        if !self.whole_node {
            return;
        }
        match event {
            LinkEvent::Added(link) if !self.attachments.is_attached(link.index) => {
                let name = link.name.clone();
                match self.add(vec![link]) {
                    Ok(()) => tracing::info!("now watching {name}"),
                    // It may be gone already, or not up yet: its traffic is seen elsewhere too.
                    Err(error) => tracing::warn!("not watching new interface {name}: {error:#}"),
                }
            }
            // A CNI creates a pod's veth, then puts it on the bridge: place it again.
            LinkEvent::Added(link) => self.update(link),
            LinkEvent::Removed { index } => {
                self.awaiting_names.forget(index);
                self.attachments.forget(index);
                self.points.remove_link(index);
                self.links.retain(|link| link.index != index);
            }
        }
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
        let Some(known) = self
            .links
            .iter_mut()
            .find(|known| known.index == link.index)
        else {
            return;
        };
        if known.role == link.role && known.name == link.name {
            return;
        }
        let pods = namespaces::discover(std::slice::from_ref(&link), &self.pod_names);
        place_link(&mut self.points, &link, &pods);
        *known = link;
        for pod in &pods {
            self.points
                .rename_loopback(pod.cookie, Namespace::new(&pod.label));
            self.awaiting_names.add(pod, Instant::now());
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
            place_link(&mut self.points, link, std::slice::from_ref(&pod));
            self.points
                .rename_loopback(pod.cookie, Namespace::new(&pod.label));
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
        let pods = if self.whole_node {
            namespaces::discover(&links, &self.pod_names)
        } else {
            Vec::new()
        };
        for link in &links {
            place_link(&mut self.points, link, &pods);
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
        }
        self.links.extend(attached);
        Ok(())
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
/// whose far end was not found is named after itself (`pod@veth-coredns-a`).
fn place_link(points: &mut PointMap, link: &Link, pods: &[PodNamespace]) {
    points.insert_link(
        link.index,
        &link.name,
        describe(link, pods),
        link_layer(link),
    );
}

/// How a saved capture describes `link`, and so where its packets are placed.
fn describe(link: &Link, pods: &[PodNamespace]) -> LinkDescription {
    let role = Role::from(&link.role);
    let namespace = match role {
        Role::Loopback => Some(Namespace::new(NODE)),
        Role::Veth { .. } => pods
            .iter()
            .find(|pod| pod.node_veth == link.index)
            .map(|pod| Namespace::new(&pod.label)),
        Role::BridgeMaster | Role::Other { .. } => None,
    };
    LinkDescription { role, namespace }
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
    use dnsloop_core::source::InterfaceRef;
    use dnsloop_ebpf::point::Direction;

    use super::*;
    use crate::node::topology::LinkRole;

    #[test]
    fn a_described_link_is_placed_as_live() {
        let link = Link {
            index: 7,
            name: "veth-coredns-a".into(),
            role: LinkRole::Veth {
                peer_netns_id: 1,
                peer_index: 2,
                bridged: true,
            },
            ethernet: true,
        };
        let pod = PodNamespace {
            node_veth: 7,
            path: "/run/netns/coredns-a".into(),
            label: "pod 10.244.0.3".into(),
            cookie: 42,
            inode: 4026532301,
            pod: None,
        };
        let mut live = PointMap::default();
        place_link(&mut live, &link, std::slice::from_ref(&pod));
        let described = LinkDescription {
            role: Role::Veth { bridged: true },
            namespace: Some(Namespace::new("pod 10.244.0.3")),
        };
        let interface = InterfaceRef {
            netns_cookie: 0,
            ifindex: 7,
        };
        let [ingress, egress] = described.points(&link.name);
        assert_eq!(live.get(interface, Direction::Ingress), Some(&ingress));
        assert_eq!(live.get(interface, Direction::Egress), Some(&egress));
    }
}
