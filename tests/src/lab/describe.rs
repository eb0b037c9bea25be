//! The human description of a lab (`cargo xtask lab status`): topology, addresses, and what
//! each DNS server answers and forwards where.
use std::{
    fmt::{self, Write as _},
    net::IpAddr,
};

use super::{
    kubelet,
    network::{EXTERNAL_BRIDGE, UNDERLAY_BRIDGE},
    scenario::Scenario,
    servers::ServerConfig,
    state,
    topology::{
        node_underlay_on, node_uplink_on, overlay_address_on, pod_cidr_on, pod_gateway6_on,
        pod_gateway_on, role_of_address, Namespaces, Pod, PodNetwork, Server, CLOSED_DNS,
        CLUSTER_DNS, CLUSTER_DNS_UPSTREAM, CLUSTER_DNS_V6, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6,
        NODE_UPLINK, NODE_UPLINK_V6, OVERLAY_DEVICE, POD_PREFIX_LEN, POD_PREFIX_LEN_V6,
        ROUTED_POD_GATEWAY, UNDERLAY_DEVICE, UNDERLAY_PREFIX_LEN, UPLINK_DEVICE, UPLINK_PREFIX_LEN,
        UPLINK_PREFIX_LEN_V6, UPSTREAM_DNS, UPSTREAM_DNS_V6, VXLAN_ID, VXLAN_PORT,
    },
};

/// A server's process as last seen.
pub(crate) struct ServerProcess {
    pub server: Server,
    pub node: usize,
    pub pid: u32,
    pub running: bool,
}

pub(crate) fn render(
    prefix: &str,
    scenario: Scenario,
    nodes: usize,
    processes: &[ServerProcess],
) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = write_description(&mut text, prefix, scenario, nodes, processes);
    text
}

fn write_description(
    out: &mut String,
    prefix: &str,
    scenario: Scenario,
    nodes: usize,
    processes: &[ServerProcess],
) -> fmt::Result {
    let pods_per_node: Vec<Vec<Pod>> = (0..nodes).map(|node| scenario.pods_on(node)).collect();
    let names = Namespaces::new(prefix, &pods_per_node);
    let settings = scenario.node_settings();
    let endpoints: Vec<String> = (0..nodes)
        .flat_map(|node| {
            scenario
                .pods_on(node)
                .into_iter()
                .filter(|pod| Pod::COREDNS.contains(pod))
                .map(move |pod| match node {
                    0 => pod.name().to_owned(),
                    node => format!("{} on node {node}", pod.name()),
                })
        })
        .collect();
    writeln!(
        out,
        "dnsloop lab `{prefix}`, scenario {scenario}, {nodes} node{}",
        if nodes == 1 { "" } else { "s" }
    )?;
    writeln!(out, "  {}", scenario.summary())?;
    writeln!(
        out,
        "  state, configs and logs: {}",
        state::dir(prefix).display()
    )?;
    writeln!(
        out,
        "  pods named as a kubelet names them: `dnsloop trace --pod-logs {}`",
        kubelet::pod_logs(prefix).display()
    )?;

    writeln!(out, "\nnamespaces")?;
    for node_names in names.nodes() {
        let node = names
            .nodes()
            .iter()
            .position(|known| known.node() == node_names.node())
            .unwrap_or(0);
        let uplink = if nodes == 1 {
            format!("eth0 {NODE_UPLINK}/{UPLINK_PREFIX_LEN} {NODE_UPLINK_V6}/{UPLINK_PREFIX_LEN_V6} (uplink, veth to the upstream)")
        } else {
            format!(
                "{UPLINK_DEVICE} {}/{UPLINK_PREFIX_LEN} (uplink, macvlan on the fabric's {EXTERNAL_BRIDGE} bridge); \
                 {UNDERLAY_DEVICE} {}/{UNDERLAY_PREFIX_LEN} (underlay); \
                 {OVERLAY_DEVICE} {}/32 (VXLAN {VXLAN_ID}, udp {VXLAN_PORT})",
                node_uplink_on(node),
                node_underlay_on(node),
                overlay_address_on(node)
            )
        };
        let pods = match settings.pod_network {
            PodNetwork::Bridge => format!(
                "cni0 {}/{POD_PREFIX_LEN} {}/{POD_PREFIX_LEN_V6} (pods {})",
                pod_gateway_on(node),
                pod_gateway6_on(node),
                pod_cidr_on(node)
            ),
            PodNetwork::Routed => format!(
                "no bridge: pods {} routed, a /32 per pod via its cali* veth (proxy ARP for \
                 their gateway {ROUTED_POD_GATEWAY}), the rest blackholed",
                pod_cidr_on(node)
            ),
        };
        let node_cache_addresses = if settings.node_cache_takes_cluster_dns {
            format!("{NODE_LOCAL_DNS} {CLUSTER_DNS} {NODE_LOCAL_DNS_V6}")
        } else {
            format!("{NODE_LOCAL_DNS} {NODE_LOCAL_DNS_V6}")
        };
        writeln!(
            out,
            "  {:<24} node {node}: {pods}; nodelocaldns {node_cache_addresses}; {uplink}",
            node_names.node(),
        )?;
        writeln!(
            out,
            "  {:<24} ClusterIP {CLUSTER_DNS} / {CLUSTER_DNS_V6} udp+tcp 53 -> DNAT to {} \
             (nftables prerouting and output); bridge-nf-call-iptables={}",
            "",
            endpoints.join(" / "),
            u8::from(settings.bridge_nf_call_iptables)
        )?;
        if settings.node_cache_takes_cluster_dns {
            writeln!(
                out,
                "  {:<24} node-local-dns in iptables mode: NOTRACK for udp+tcp 53 to and from \
                 {NODE_LOCAL_DNS} and {CLUSTER_DNS} (raw prerouting and output), so pods asking \
                 {CLUSTER_DNS} reach this node's cache; ClusterIP {CLUSTER_DNS_UPSTREAM} \
                 (kube-dns-upstream) -> DNAT to the same pods",
                ""
            )?;
        }
        if nodes > 1 {
            let peers: Vec<String> = (0..nodes)
                .filter(|&peer| peer != node)
                .map(|peer| {
                    format!(
                        "{} via {} dev {OVERLAY_DEVICE} onlink (vtep {})",
                        pod_cidr_on(peer),
                        overlay_address_on(peer),
                        node_underlay_on(peer)
                    )
                })
                .collect();
            writeln!(out, "  {:<24} routes: {}", "", peers.join("; "))?;
        }
        for pod in node_names.pods() {
            let host_side = match settings.pod_network {
                PodNetwork::Bridge => format!("{} on cni0", pod.host_veth()),
                PodNetwork::Routed => format!("{}, routed", pod.cali_veth_on(node)),
            };
            writeln!(
                out,
                "  {:<24} pod {} ({}): eth0 {} {} ({host_side})",
                node_names.pod(pod).unwrap_or_default(),
                pod.name(),
                pod.kubernetes_id_on(node),
                pod.ip_on(node),
                pod.ip6_on(node),
            )?;
        }
    }
    if let Some(fabric) = names.fabric() {
        writeln!(
            out,
            "  {fabric:<24} fabric: bridge {UNDERLAY_BRIDGE} (every node's {UNDERLAY_DEVICE}, \
             VXLAN only), bridge {EXTERNAL_BRIDGE} (every node's {UPLINK_DEVICE}, the upstream)"
        )?;
    }
    write!(
        out,
        "  {:<24} upstream: eth0 {UPSTREAM_DNS} {UPSTREAM_DNS_V6}",
        names.upstream()
    )?;
    if let Some(dead) = settings.dead_server {
        write!(
            out,
            "; {dead} (nftables drops everything sent to it); {CLOSED_DNS} (no DNS server)"
        )?;
    }

    writeln!(out, "\n\nDNS servers")?;
    for process in processes {
        let config = scenario.server_config(process.server, process.node);
        let namespace = names
            .of_server(process.node, process.server)
            .unwrap_or_default();
        write_server(out, &config, namespace, process)?;
    }
    Ok(())
}

fn write_server(
    out: &mut String,
    config: &ServerConfig,
    namespace: &str,
    process: &ServerProcess,
) -> fmt::Result {
    let listen: Vec<String> = config.listen.iter().map(IpAddr::to_string).collect();
    let state = if process.running {
        ""
    } else {
        " (not running)"
    };
    writeln!(
        out,
        "  {} ({}, pid {}{state}) in {namespace}, listening on {}",
        config.file_stem(),
        config.software.name(),
        process.pid,
        listen.join(", ")
    )?;
    for zone in &config.local_zones {
        writeln!(out, "      {zone:<14} answered here")?;
    }
    for (name, address) in &config.records {
        writeln!(out, "      {:<14}   {name} -> {address}", "")?;
    }
    for forward in &config.forwards {
        let role = role_of_address(forward.to)
            .map(|role| format!(" ({role})"))
            .unwrap_or_default();
        writeln!(
            out,
            "      {:<14} -> {}{role} over {}",
            forward.zone,
            forward.to,
            config.forward_protocol()
        )?;
    }
    Ok(())
}
