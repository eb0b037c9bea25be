//! Wires the simulated node: what the CNI plugin, kube-proxy and the node's own network
//! configuration would set up. Every link is created inside a lab namespace (veth peers go
//! straight into their target namespace), so nothing ever appears in the root namespace.
use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
};

use anyhow::{Context as _, Result};

use super::{
    command, netns, nftables,
    topology::{
        Namespaces, Pod, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, NODE_LOCAL_NET, NODE_LOCAL_NET_V6,
        NODE_UPLINK, NODE_UPLINK_V6, POD_GATEWAY, POD_GATEWAY_V6, POD_PREFIX_LEN,
        POD_PREFIX_LEN_V6, UPLINK_PREFIX_LEN, UPLINK_PREFIX_LEN_V6, UPSTREAM_DNS, UPSTREAM_DNS_V6,
    },
};

/// The node-side knobs a scenario turns.
pub(crate) struct NodeSettings {
    /// `net.bridge.bridge-nf-call-iptables` (and `-ip6tables`) in the node namespace.
    pub bridge_nf_call_iptables: bool,
    /// An address in the upstream namespace where every packet is dropped.
    pub dead_server: Option<Ipv4Addr>,
}

/// Builds links, addresses, routes, sysctls and nftables rules in the (existing, empty)
/// namespaces `names`; nftables rule files are written to `state_dir`.
pub(crate) fn wire(names: &Namespaces, settings: &NodeSettings, state_dir: &Path) -> Result<()> {
    for namespace in names.all() {
        prepare(namespace)?;
    }
    wire_node(names.node(), settings.bridge_nf_call_iptables)?;
    for pod in Pod::ALL {
        wire_pod(names, pod).with_context(|| format!("wiring pod {}", pod.name()))?;
    }
    wire_uplink(names).context("wiring the node's uplink to the upstream namespace")?;
    nftables::load(
        names.node(),
        &nftables::cluster_dns_service(),
        &state_dir.join("node.nft"),
    )?;
    if let Some(dead) = settings.dead_server {
        netns::ip(
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
    }
    Ok(())
}

/// Loopback up, and no duplicate address detection: addresses (link-local ones included) must
/// be usable the moment `up` returns.
fn prepare(namespace: &str) -> Result<()> {
    netns::ip(namespace, &["link", "set", "lo", "up"])?;
    netns::sysctl(
        namespace,
        &[
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ],
    )
}

fn wire_node(node: &str, bridge_nf_call_iptables: bool) -> Result<()> {
    add_bridge(node, "cni0")?;
    add_address(node, "cni0", &format!("{POD_GATEWAY}/{POD_PREFIX_LEN}"))?;
    add_address(
        node,
        "cni0",
        &format!("{POD_GATEWAY_V6}/{POD_PREFIX_LEN_V6}"),
    )?;
    // node-local-dns puts its address on a dummy device; this kernel has no dummy driver, and a
    // bridge without ports is just as good a place for a local address.
    add_bridge(node, "nodelocaldns")?;
    add_address(node, "nodelocaldns", &format!("{NODE_LOCAL_DNS}/32"))?;
    add_address(node, "nodelocaldns", &format!("{NODE_LOCAL_DNS_V6}/128"))?;
    netns::sysctl(
        node,
        &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
    )?;
    set_bridge_netfilter(node, bridge_nf_call_iptables)
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
    if netns::sysctl(node, &settings).is_ok() {
        return Ok(());
    }
    // The sysctls exist (per namespace) once br_netfilter is loaded; it may be a module or be
    // built in, and modprobe may not even be installed when it is built in.
    let _ = command::output(&["modprobe", "br_netfilter"]);
    netns::sysctl(node, &settings).context(
        "br_netfilter is unavailable (no net.bridge.bridge-nf-call-iptables): \
         load it with `modprobe br_netfilter` or use a kernel with CONFIG_BRIDGE_NETFILTER",
    )
}

fn wire_pod(names: &Namespaces, pod: Pod) -> Result<()> {
    let node = names.node();
    let pod_ns = names.pod(pod);
    let host_veth = pod.host_veth();
    netns::ip(
        node,
        &[
            "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", pod_ns,
        ],
    )?;
    netns::ip(node, &["link", "set", &host_veth, "master", "cni0", "up"])?;
    add_address(pod_ns, "eth0", &format!("{}/{POD_PREFIX_LEN}", pod.ip()))?;
    add_address(
        pod_ns,
        "eth0",
        &format!("{}/{POD_PREFIX_LEN_V6}", pod.ip6()),
    )?;
    netns::ip(pod_ns, &["link", "set", "eth0", "up"])?;
    add_route(pod_ns, "default", &POD_GATEWAY.to_string())?;
    add_route(pod_ns, "default", &POD_GATEWAY_V6.to_string())
}

/// The node's `eth0` faces the upstream namespace's `eth0`. The node's default route points at
/// the upstream, as a node's points at its uplink; that is also the route the node's own
/// queries to the ClusterIP take before the output chain DNATs them.
fn wire_uplink(names: &Namespaces) -> Result<()> {
    let (node, upstream) = (names.node(), names.upstream());
    netns::ip(
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
    netns::ip(node, &["link", "set", "eth0", "up"])?;
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
    netns::ip(upstream, &["link", "set", "eth0", "up"])?;
    add_route(node, "default", &UPSTREAM_DNS.to_string())?;
    add_route(node, "default", &UPSTREAM_DNS_V6.to_string())?;
    // Routes back to the pods and the node-local address, so the node masquerades nothing.
    for destination in [pod_network_v4(), NODE_LOCAL_NET.to_owned()] {
        add_route(upstream, &destination, &NODE_UPLINK.to_string())?;
    }
    for destination in [pod_network_v6(), NODE_LOCAL_NET_V6.to_owned()] {
        add_route(upstream, &destination, &NODE_UPLINK_V6.to_string())?;
    }
    Ok(())
}

fn pod_network_v4() -> String {
    let network = Ipv4Addr::from_bits(POD_GATEWAY.to_bits() & (u32::MAX << (32 - POD_PREFIX_LEN)));
    format!("{network}/{POD_PREFIX_LEN}")
}

fn pod_network_v6() -> String {
    let mask = u128::MAX << (128 - u32::from(POD_PREFIX_LEN_V6));
    let network = Ipv6Addr::from_bits(POD_GATEWAY_V6.to_bits() & mask);
    format!("{network}/{POD_PREFIX_LEN_V6}")
}

fn add_bridge(namespace: &str, name: &str) -> Result<()> {
    netns::ip(namespace, &["link", "add", name, "type", "bridge"])?;
    netns::ip(namespace, &["link", "set", name, "up"])
}

/// Adds an address; IPv6 ones with `nodad` so they are usable at once.
fn add_address(namespace: &str, device: &str, address: &str) -> Result<()> {
    let mut args = vec!["addr", "add", address, "dev", device];
    if address.contains(':') {
        args.push("nodad");
    }
    netns::ip(namespace, &args)
}

/// Adds a route in the address family of `gateway`.
fn add_route(namespace: &str, destination: &str, gateway: &str) -> Result<()> {
    let family = if gateway.contains(':') { "-6" } else { "-4" };
    netns::ip(
        namespace,
        &[family, "route", "add", destination, "via", gateway],
    )
}
