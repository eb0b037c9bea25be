//! Wires the simulated nodes: what the CNI plugin, kube-proxy and the node's own network
//! configuration would set up. Every link is created inside a lab namespace (veth peers go
//! straight into their target namespace), so nothing ever appears in the root namespace.
//!
//! One node: its `eth0` is a veth into the upstream namespace. Two nodes or more are joined as
//! a cluster's are, through a `<prefix>-fabric` namespace standing for the physical network:
//! each node's `eth1` is a port of the fabric's `underlay` bridge, which carries nothing but the
//! VXLAN overlay (`vxlan0`, flannel-style static routes, neighbours and forwarding entries);
//! each node's `eth0` is a macvlan on the fabric's `external` bridge, where the upstream is. No
//! link of a node leads into another node's namespace.
use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
};

use anyhow::ensure;

use anyhow::{Context as _, Result};

use super::{
    command, ip_netns, nftables,
    topology::{
        node_underlay_on, node_uplink_on, overlay_address_on, overlay_mac_on, pod_cidr6_on,
        pod_cidr_on, pod_gateway6_on, pod_gateway_on, Namespaces, NodeNamespaces, Pod, PodNetwork,
        CLOSED_DNS, CLUSTER_DNS, CLUSTER_DNS_UPSTREAM, GONE_SUBNET, NODE_LOCAL_DNS,
        NODE_LOCAL_DNS_V6, NODE_LOCAL_NET, NODE_LOCAL_NET_V6, NODE_UPLINK, NODE_UPLINK_V6, ODD_DNS,
        OVERLAY_DEVICE, POD_PREFIX_LEN, POD_PREFIX_LEN_V6, ROUTED_HOST_VETH_MAC,
        ROUTED_POD_GATEWAY, ROUTED_POD_GATEWAY_V6, UNDERLAY_DEVICE, UNDERLAY_PREFIX_LEN,
        UPLINK_DEVICE, UPLINK_PREFIX_LEN, UPLINK_PREFIX_LEN_V6, UPSTREAM_DNS, UPSTREAM_DNS_V6,
        VXLAN_ID, VXLAN_PORT,
    },
};

/// The node-side knobs a scenario turns.
pub(crate) struct NodeSettings {
    /// `net.bridge.bridge-nf-call-iptables` (and `-ip6tables`) in the node namespace.
    pub bridge_nf_call_iptables: bool,
    /// An address in the upstream namespace where every packet is dropped; with it, the
    /// other servers that never answer (see `topology::dead_stub_domains`).
    pub dead_server: Option<Ipv4Addr>,
    /// Pods on the `cni0` bridge, or routed (Calico-style).
    pub pod_network: PodNetwork,
    /// node-local-dns in iptables mode: the kube-dns ClusterIP is also the node cache's
    /// address, NOTRACK keeps kube-proxy's DNAT away from it, and kube-dns-upstream is the
    /// Service that still leads to CoreDNS.
    pub node_cache_takes_cluster_dns: bool,
}

/// The fabric's bridges: one for the overlay's encapsulated packets, one for the network the
/// upstream resolver is on.
pub const UNDERLAY_BRIDGE: &str = "underlay";
pub const EXTERNAL_BRIDGE: &str = "external";

/// Builds links, addresses, routes, sysctls and nftables rules in the (existing, empty)
/// namespaces `names`; nftables rule files are written to `state_dir`.
pub(crate) fn wire(names: &Namespaces, settings: &NodeSettings, state_dir: &Path) -> Result<()> {
    for namespace in names.all() {
        prepare(namespace)?;
    }
    // The Service's endpoints: every CoreDNS pod of the cluster over IPv4; over IPv6 only the
    // node's own, as the overlay carries IPv4 only.
    let endpoints: Vec<Ipv4Addr> = names
        .nodes()
        .iter()
        .enumerate()
        .flat_map(|(node, node_names)| coredns_pods(node_names).map(move |pod| pod.ip_on(node)))
        .collect();
    ensure!(
        !endpoints.is_empty(),
        "the scenario runs no CoreDNS pod: the cluster DNS Service would have no endpoint"
    );
    // In iptables mode kube-proxy still programs kube-dns (NOTRACK bypasses it), and
    // kube-dns-upstream with the same endpoints.
    let services: &[Ipv4Addr] = if settings.node_cache_takes_cluster_dns {
        &[CLUSTER_DNS, CLUSTER_DNS_UPSTREAM]
    } else {
        &[CLUSTER_DNS]
    };
    for (node, node_names) in names.nodes().iter().enumerate() {
        wire_node(node_names.node(), node, settings)
            .with_context(|| format!("wiring node {node}"))?;
        for pod in node_names.pods() {
            match settings.pod_network {
                PodNetwork::Bridge => wire_pod(node_names, node, pod),
                PodNetwork::Routed => wire_routed_pod(node_names, node, pod),
            }
            .with_context(|| format!("wiring pod {} on node {node}", pod.name()))?;
        }
        let endpoints_v6: Vec<Ipv6Addr> = coredns_pods(node_names)
            .map(|pod| pod.ip6_on(node))
            .collect();
        nftables::load(
            node_names.node(),
            &nftables::cluster_dns_service(services, &endpoints, &endpoints_v6),
            &state_dir.join(node_file(node, "nft")),
        )?;
        if settings.node_cache_takes_cluster_dns {
            nftables::load(
                node_names.node(),
                &nftables::node_local_dns_notrack(&[NODE_LOCAL_DNS, CLUSTER_DNS]),
                &state_dir.join(node_file(node, "notrack.nft")),
            )?;
        }
    }
    match names.fabric() {
        None => wire_uplink(names).context("wiring the node's uplink to the upstream namespace")?,
        Some(fabric) => wire_cluster(names, fabric, state_dir)
            .context("joining the nodes through the fabric namespace")?,
    }
    if let Some(dead) = settings.dead_server {
        ip_netns::ip(
            names.upstream(),
            &[
                "addr",
                "add",
                &format!("{dead}/{UPLINK_PREFIX_LEN}"),
                "dev",
                "eth0",
            ],
        )?;
        nftables::load(
            names.upstream(),
            &nftables::black_hole(dead),
            &state_dir.join("upstream.nft"),
        )?;
        ip_netns::ip(
            names.upstream(),
            &[
                "addr",
                "add",
                &format!("{CLOSED_DNS}/{UPLINK_PREFIX_LEN}"),
                "dev",
                "eth0",
            ],
        )?;
        ip_netns::ip(
            names.upstream(),
            &[
                "addr",
                "add",
                &format!("{ODD_DNS}/{UPLINK_PREFIX_LEN}"),
                "dev",
                "eth0",
            ],
        )?;
        if settings.pod_network == PodNetwork::Bridge {
            for node_names in names.nodes() {
                ip_netns::ip(
                    node_names.node(),
                    &["route", "add", GONE_SUBNET, "dev", "cni0"],
                )?;
            }
        }
    }
    Ok(())
}

fn coredns_pods(node_names: &NodeNamespaces) -> impl Iterator<Item = Pod> + '_ {
    node_names.pods().filter(|pod| Pod::COREDNS.contains(pod))
}

/// `node.<extension>` for node 0, `node1.<extension>` for node 1, ...
fn node_file(node: usize, extension: &str) -> String {
    match node {
        0 => format!("node.{extension}"),
        node => format!("node{node}.{extension}"),
    }
}

/// Loopback up, and no duplicate address detection: addresses (link-local ones included) must
/// be usable the moment `up` returns.
fn prepare(namespace: &str) -> Result<()> {
    ip_netns::ip(namespace, &["link", "set", "lo", "up"])?;
    ip_netns::sysctl(
        namespace,
        &[
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ],
    )
}

fn wire_node(node: &str, index: usize, settings: &NodeSettings) -> Result<()> {
    match settings.pod_network {
        PodNetwork::Bridge => {
            add_bridge(node, "cni0")?;
            add_address(
                node,
                "cni0",
                &format!("{}/{POD_PREFIX_LEN}", pod_gateway_on(index)),
            )?;
            add_address(
                node,
                "cni0",
                &format!("{}/{POD_PREFIX_LEN_V6}", pod_gateway6_on(index)),
            )?;
        }
        // Calico's IPAM block route: the pods' /32 routes are more specific; an address of the
        // block no pod has goes nowhere instead of out of the default route.
        PodNetwork::Routed => {
            ip_netns::ip(
                node,
                &["-4", "route", "add", "blackhole", &pod_cidr_on(index)],
            )?;
            ip_netns::ip(
                node,
                &["-6", "route", "add", "blackhole", &pod_cidr6_on(index)],
            )?;
        }
    }
    // node-local-dns puts its address on a dummy device; this kernel has no dummy driver, and a
    // bridge without ports is just as good a place for a local address.
    add_bridge(node, "nodelocaldns")?;
    add_address(node, "nodelocaldns", &format!("{NODE_LOCAL_DNS}/32"))?;
    add_address(node, "nodelocaldns", &format!("{NODE_LOCAL_DNS_V6}/128"))?;
    if settings.node_cache_takes_cluster_dns {
        add_address(node, "nodelocaldns", &format!("{CLUSTER_DNS}/32"))?;
    }
    ip_netns::sysctl(
        node,
        &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
    )?;
    set_bridge_netfilter(node, settings.bridge_nf_call_iptables)
}

/// Whether frames bridged between pods on `cni0` pass through netfilter (conntrack and NAT),
/// which kube-proxy needs so that a pod's reply to a pod on the same bridge is un-DNATed.
fn set_bridge_netfilter(node: &str, enabled: bool) -> Result<()> {
    let value = u8::from(enabled);
    let settings = [
        format!("net.bridge.bridge-nf-call-iptables={value}"),
        format!("net.bridge.bridge-nf-call-ip6tables={value}"),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    if ip_netns::sysctl(node, &settings).is_ok() {
        return Ok(());
    }
    // The sysctls exist (per namespace) once br_netfilter is loaded; it may be a module or be
    // built in, and modprobe may not even be installed when it is built in.
    let _ = command::output(&["modprobe", "br_netfilter"]);
    ip_netns::sysctl(node, &settings).context(
        "br_netfilter is unavailable (no net.bridge.bridge-nf-call-iptables): \
         load it with `modprobe br_netfilter` or use a kernel with CONFIG_BRIDGE_NETFILTER",
    )
}

fn wire_pod(names: &NodeNamespaces, index: usize, pod: Pod) -> Result<()> {
    let node = names.node();
    let pod_ns = names
        .pod(pod)
        .with_context(|| format!("node {index} runs no pod {}", pod.name()))?;
    let host_veth = pod.host_veth();
    ip_netns::ip(
        node,
        &[
            "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", pod_ns,
        ],
    )?;
    ip_netns::ip(node, &["link", "set", &host_veth, "master", "cni0", "up"])?;
    add_address(
        pod_ns,
        "eth0",
        &format!("{}/{POD_PREFIX_LEN}", pod.ip_on(index)),
    )?;
    add_address(
        pod_ns,
        "eth0",
        &format!("{}/{POD_PREFIX_LEN_V6}", pod.ip6_on(index)),
    )?;
    ip_netns::ip(pod_ns, &["link", "set", "eth0", "up"])?;
    add_route(pod_ns, "default", &pod_gateway_on(index).to_string())?;
    add_route(pod_ns, "default", &pod_gateway6_on(index).to_string())
}

/// A pod as Calico wires it: its `eth0` has a /32 (and a /128) and a default route via
/// [`ROUTED_POD_GATEWAY`], an address no device has; the host veth `cali...` has no address
/// but answers ARP for everything by proxy (at once: proxy_delay 0), and the node routes the
/// pod's /32 to it.
fn wire_routed_pod(names: &NodeNamespaces, index: usize, pod: Pod) -> Result<()> {
    let node = names.node();
    let pod_ns = names
        .pod(pod)
        .with_context(|| format!("node {index} runs no pod {}", pod.name()))?;
    let host_veth = pod.cali_veth_on(index);
    ip_netns::ip(
        node,
        &[
            "link",
            "add",
            &host_veth,
            "address",
            ROUTED_HOST_VETH_MAC,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod_ns,
        ],
    )?;
    ip_netns::sysctl(
        node,
        &[
            &format!("net.ipv4.conf.{host_veth}.proxy_arp=1"),
            &format!("net.ipv4.neigh.{host_veth}.proxy_delay=0"),
        ],
    )?;
    // The pods' IPv6 gateway is the link-local address the MAC gives; set it before the link
    // is up, so it is there (and without DAD) the moment `up` returns.
    ip_netns::ip(node, &["link", "set", &host_veth, "addrgenmode", "none"])?;
    add_address(node, &host_veth, &format!("{ROUTED_POD_GATEWAY_V6}/64"))?;
    ip_netns::ip(node, &["link", "set", &host_veth, "up"])?;
    add_address(pod_ns, "eth0", &format!("{}/32", pod.ip_on(index)))?;
    add_address(pod_ns, "eth0", &format!("{}/128", pod.ip6_on(index)))?;
    ip_netns::ip(pod_ns, &["link", "set", "eth0", "up"])?;
    ip_netns::ip(
        pod_ns,
        &[
            "-4",
            "route",
            "add",
            "default",
            "via",
            &ROUTED_POD_GATEWAY.to_string(),
            "dev",
            "eth0",
            "onlink",
        ],
    )?;
    ip_netns::ip(
        pod_ns,
        &[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &ROUTED_POD_GATEWAY_V6.to_string(),
            "dev",
            "eth0",
        ],
    )?;
    ip_netns::ip(
        node,
        &[
            "-4",
            "route",
            "add",
            &format!("{}/32", pod.ip_on(index)),
            "dev",
            &host_veth,
            "scope",
            "link",
        ],
    )?;
    ip_netns::ip(
        node,
        &[
            "-6",
            "route",
            "add",
            &format!("{}/128", pod.ip6_on(index)),
            "dev",
            &host_veth,
        ],
    )
}

/// The node's `eth0` faces the upstream namespace's `eth0`. The node's default route points at
/// the upstream, as a node's points at its uplink; that is also the route the node's own
/// queries to the ClusterIP take before the output chain DNATs them.
fn wire_uplink(names: &Namespaces) -> Result<()> {
    let (node, upstream) = (names.node(), names.upstream());
    ip_netns::ip(
        node,
        &[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", upstream,
        ],
    )?;
    add_address(node, "eth0", &format!("{NODE_UPLINK}/{UPLINK_PREFIX_LEN}"))?;
    add_address(
        node,
        "eth0",
        &format!("{NODE_UPLINK_V6}/{UPLINK_PREFIX_LEN_V6}"),
    )?;
    ip_netns::ip(node, &["link", "set", "eth0", "up"])?;
    add_address(
        upstream,
        "eth0",
        &format!("{UPSTREAM_DNS}/{UPLINK_PREFIX_LEN}"),
    )?;
    add_address(
        upstream,
        "eth0",
        &format!("{UPSTREAM_DNS_V6}/{UPLINK_PREFIX_LEN_V6}"),
    )?;
    ip_netns::ip(upstream, &["link", "set", "eth0", "up"])?;
    add_route(node, "default", &UPSTREAM_DNS.to_string())?;
    add_route(node, "default", &UPSTREAM_DNS_V6.to_string())?;
    // Routes back to the pods and the node-local address, so the node masquerades nothing.
    for destination in [pod_cidr_on(0), NODE_LOCAL_NET.to_owned()] {
        add_route(upstream, &destination, &NODE_UPLINK.to_string())?;
    }
    for destination in [pod_cidr6_on(0), NODE_LOCAL_NET_V6.to_owned()] {
        add_route(upstream, &destination, &NODE_UPLINK_V6.to_string())?;
    }
    Ok(())
}

/// Node `node`'s IPv6 address on its uplink (node 0's is [`NODE_UPLINK_V6`]).
fn node_uplink6_on(node: usize) -> Ipv6Addr {
    let offset = u128::try_from(node).unwrap_or(0);
    Ipv6Addr::from_bits(NODE_UPLINK_V6.to_bits() + offset)
}

/// Joins the nodes as a cluster's machines are joined: the fabric's `underlay` bridge for the
/// overlay, its `external` bridge for the upstream.
fn wire_cluster(names: &Namespaces, fabric: &str, state_dir: &Path) -> Result<()> {
    let upstream = names.upstream();
    add_bridge(fabric, UNDERLAY_BRIDGE)?;
    add_bridge(fabric, EXTERNAL_BRIDGE)?;
    // The upstream is a machine on the external network: a port of the external bridge.
    ip_netns::ip(
        fabric,
        &[
            "link", "add", "upstream", "type", "veth", "peer", "name", "eth0", "netns", upstream,
        ],
    )?;
    ip_netns::ip(
        fabric,
        &["link", "set", "upstream", "master", EXTERNAL_BRIDGE, "up"],
    )?;
    add_address(
        upstream,
        "eth0",
        &format!("{UPSTREAM_DNS}/{UPLINK_PREFIX_LEN}"),
    )?;
    add_address(
        upstream,
        "eth0",
        &format!("{UPSTREAM_DNS_V6}/{UPLINK_PREFIX_LEN_V6}"),
    )?;
    ip_netns::ip(upstream, &["link", "set", "eth0", "up"])?;
    for (index, node_names) in names.nodes().iter().enumerate() {
        let node = node_names.node();
        wire_macvlan_uplink(fabric, node, index)
            .with_context(|| format!("wiring node {index}'s uplink"))?;
        wire_overlay_device(fabric, node, index)
            .with_context(|| format!("wiring node {index}'s underlay and overlay"))?;
        add_route(
            upstream,
            &pod_cidr_on(index),
            &node_uplink_on(index).to_string(),
        )?;
        nftables::load(
            node,
            &nftables::node_masquerade(),
            &state_dir.join(node_file(index, "masquerade.nft")),
        )?;
    }
    // Every node's cache is 169.254.25.10 and is masqueraded on the way out; this route is for
    // node 0, whose address it is in a one-node lab too.
    add_route(upstream, NODE_LOCAL_NET, &NODE_UPLINK.to_string())?;
    add_route(upstream, NODE_LOCAL_NET_V6, &NODE_UPLINK_V6.to_string())?;
    for (index, node_names) in names.nodes().iter().enumerate() {
        for peer in (0..names.nodes().len()).filter(|&peer| peer != index) {
            route_over_overlay(node_names.node(), peer)
                .with_context(|| format!("routing node {peer}'s pods from node {index}"))?;
        }
    }
    Ok(())
}

/// The node's `eth0`: a macvlan whose lower device is the fabric's external bridge, moved into
/// the node. Its far end is the fabric, not a namespace of this node.
fn wire_macvlan_uplink(fabric: &str, node: &str, index: usize) -> Result<()> {
    let temporary = format!("uplink{index}");
    ip_netns::ip(
        fabric,
        &[
            "link",
            "add",
            &temporary,
            "link",
            EXTERNAL_BRIDGE,
            "type",
            "macvlan",
            "mode",
            "bridge",
        ],
    )?;
    ip_netns::ip(fabric, &["link", "set", &temporary, "netns", node])?;
    ip_netns::ip(node, &["link", "set", &temporary, "name", UPLINK_DEVICE])?;
    add_address(
        node,
        UPLINK_DEVICE,
        &format!("{}/{UPLINK_PREFIX_LEN}", node_uplink_on(index)),
    )?;
    add_address(
        node,
        UPLINK_DEVICE,
        &format!("{}/{UPLINK_PREFIX_LEN_V6}", node_uplink6_on(index)),
    )?;
    ip_netns::ip(node, &["link", "set", UPLINK_DEVICE, "up"])?;
    add_route(node, "default", &UPSTREAM_DNS.to_string())?;
    add_route(node, "default", &UPSTREAM_DNS_V6.to_string())
}

/// The node's `eth1` on the fabric's underlay bridge, and its VXLAN device on top of it.
fn wire_overlay_device(fabric: &str, node: &str, index: usize) -> Result<()> {
    let fabric_port = format!("underlay{index}");
    ip_netns::ip(
        fabric,
        &[
            "link",
            "add",
            &fabric_port,
            "type",
            "veth",
            "peer",
            "name",
            UNDERLAY_DEVICE,
            "netns",
            node,
        ],
    )?;
    ip_netns::ip(
        fabric,
        &["link", "set", &fabric_port, "master", UNDERLAY_BRIDGE, "up"],
    )?;
    let underlay = node_underlay_on(index).to_string();
    add_address(
        node,
        UNDERLAY_DEVICE,
        &format!("{underlay}/{UNDERLAY_PREFIX_LEN}"),
    )?;
    ip_netns::ip(node, &["link", "set", UNDERLAY_DEVICE, "up"])?;
    // Like flannel's vxlan backend: no learning, every peer given statically.
    ip_netns::ip(
        node,
        &[
            "link",
            "add",
            OVERLAY_DEVICE,
            "address",
            &overlay_mac_on(index),
            "type",
            "vxlan",
            "id",
            &VXLAN_ID.to_string(),
            "local",
            &underlay,
            "dev",
            UNDERLAY_DEVICE,
            "dstport",
            &VXLAN_PORT.to_string(),
            "nolearning",
        ],
    )?;
    add_address(
        node,
        OVERLAY_DEVICE,
        &format!("{}/32", overlay_address_on(index)),
    )?;
    ip_netns::ip(node, &["link", "set", OVERLAY_DEVICE, "up"])
}

/// On `node`: node `peer`'s pod CIDR via its overlay address, which is a permanent neighbour
/// with `peer`'s VXLAN MAC, which the forwarding database sends to `peer`'s underlay address.
fn route_over_overlay(node: &str, peer: usize) -> Result<()> {
    let gateway = overlay_address_on(peer).to_string();
    let mac = overlay_mac_on(peer);
    ip_netns::ip(
        node,
        &[
            "route",
            "add",
            &pod_cidr_on(peer),
            "via",
            &gateway,
            "dev",
            OVERLAY_DEVICE,
            "onlink",
        ],
    )?;
    ip_netns::ip(
        node,
        &[
            "neigh",
            "add",
            &gateway,
            "lladdr",
            &mac,
            "dev",
            OVERLAY_DEVICE,
            "nud",
            "permanent",
        ],
    )?;
    command::run(&[
        "bridge",
        "-n",
        node,
        "fdb",
        "append",
        &mac,
        "dev",
        OVERLAY_DEVICE,
        "dst",
        &node_underlay_on(peer).to_string(),
    ])?;
    Ok(())
}

fn add_bridge(namespace: &str, name: &str) -> Result<()> {
    ip_netns::ip(namespace, &["link", "add", name, "type", "bridge"])?;
    ip_netns::ip(namespace, &["link", "set", name, "up"])
}

/// Adds an address; IPv6 ones with `nodad` so they are usable at once.
fn add_address(namespace: &str, device: &str, address: &str) -> Result<()> {
    let mut args = vec!["addr", "add", address, "dev", device];
    if address.contains(':') {
        args.push("nodad");
    }
    ip_netns::ip(namespace, &args)
}

/// Adds a route in the address family of `gateway`.
fn add_route(namespace: &str, destination: &str, gateway: &str) -> Result<()> {
    let family = if gateway.contains(':') { "-6" } else { "-4" };
    ip_netns::ip(
        namespace,
        &[family, "route", "add", destination, "via", gateway],
    )
}
