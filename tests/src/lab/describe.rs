//! The human description of a lab (`cargo xtask lab status`): topology, addresses, and what
//! each DNS server answers and forwards where.
use std::{
    fmt::{self, Write as _},
    net::IpAddr,
};

use super::{
    kubelet,
    scenario::Scenario,
    servers::ServerConfig,
    state,
    topology::{
        role_of_address, Namespaces, Pod, Server, CLUSTER_DNS, CLUSTER_DNS_V6, NODE_LOCAL_DNS,
        NODE_LOCAL_DNS_V6, NODE_UPLINK, NODE_UPLINK_V6, POD_GATEWAY, POD_GATEWAY_V6,
        POD_PREFIX_LEN, POD_PREFIX_LEN_V6, UPLINK_PREFIX_LEN, UPLINK_PREFIX_LEN_V6, UPSTREAM_DNS,
        UPSTREAM_DNS_V6,
    },
};

/// A server's process as last seen.
pub(crate) struct ServerProcess {
    pub server: Server,
    pub pid: u32,
    pub running: bool,
}

pub(crate) fn render(prefix: &str, scenario: Scenario, processes: &[ServerProcess]) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = write_description(&mut text, prefix, scenario, processes);
    text
}

fn write_description(
    out: &mut String,
    prefix: &str,
    scenario: Scenario,
    processes: &[ServerProcess],
) -> fmt::Result {
    let names = Namespaces::new(prefix);
    let settings = scenario.node_settings();
    let [coredns_a, coredns_b] = Pod::COREDNS;
    writeln!(out, "dnsloop lab `{prefix}`, scenario {scenario}")?;
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
    writeln!(
        out,
        "  {:<24} node: cni0 {POD_GATEWAY}/{POD_PREFIX_LEN} {POD_GATEWAY_V6}/{POD_PREFIX_LEN_V6}; \
         nodelocaldns {NODE_LOCAL_DNS} {NODE_LOCAL_DNS_V6}; \
         eth0 {NODE_UPLINK}/{UPLINK_PREFIX_LEN} {NODE_UPLINK_V6}/{UPLINK_PREFIX_LEN_V6} (uplink)",
        names.node()
    )?;
    writeln!(
        out,
        "  {:<24} ClusterIP {CLUSTER_DNS} / {CLUSTER_DNS_V6} udp+tcp 53 -> DNAT to {} / {} \
         (nftables prerouting and output); bridge-nf-call-iptables={}",
        "",
        coredns_a.name(),
        coredns_b.name(),
        u8::from(settings.bridge_nf_call_iptables)
    )?;
    for pod in Pod::ALL {
        writeln!(
            out,
            "  {:<24} pod {} ({}): eth0 {} {} ({} on cni0)",
            names.pod(pod),
            pod.name(),
            pod.kubernetes_id(),
            pod.ip(),
            pod.ip6(),
            pod.host_veth()
        )?;
    }
    write!(
        out,
        "  {:<24} upstream: eth0 {UPSTREAM_DNS} {UPSTREAM_DNS_V6}",
        names.upstream()
    )?;
    if let Some(dead) = settings.dead_server {
        write!(out, "; {dead} (nftables drops everything sent to it)")?;
    }

    writeln!(out, "\n\nDNS servers")?;
    for process in processes {
        let config = scenario.server_config(process.server);
        write_server(out, &config, names.of_server(process.server), process)?;
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
        config.server.name(),
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
