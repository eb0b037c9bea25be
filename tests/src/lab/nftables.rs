//! nftables rulesets: the cluster DNS Service as kube-proxy would program it, and the drop rule
//! that makes the dead server dead.
use std::{
    fmt::Display,
    fs,
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
};

use anyhow::{Context as _, Result};

use super::{
    command, ip_netns,
    topology::{
        CLUSTER_DNS_V6, CLUSTER_POD_NETWORK, NODE_LOCAL_NET, OVERLAY_DEVICE, UPLINK_DEVICE,
    },
};

/// DNATs the cluster DNS ClusterIP (UDP and TCP port 53) to each of `endpoints` in turn (the
/// CoreDNS pods, wherever they run), in prerouting (traffic from pods) and in output (the
/// node's own resolver), like kube-proxy in IPVS mode (round robin). Not at random, as
/// kube-proxy's iptables mode picks: each of a node cache's few sockets is one flow, DNAT'ed
/// once, and `numgen random` sent all eight of one cache's to one pod in 1 lab of 6 here, so
/// a loop storm could stay on its node; in turn, every node cache reaches every node. IPv6 goes to `endpoints_v6`, the CoreDNS pods the
/// node reaches over IPv6 (none: no IPv6 Service). Nothing is masqueraded: pods see each
/// other's real addresses.
///
/// `services` are the ClusterIPs that lead to those endpoints: kube-dns
/// ([`CLUSTER_DNS`](super::topology::CLUSTER_DNS)), and kube-dns-upstream where node-local-dns
/// runs in iptables mode.
pub(crate) fn cluster_dns_service(
    services: &[Ipv4Addr],
    endpoints: &[Ipv4Addr],
    endpoints_v6: &[Ipv6Addr],
) -> String {
    let mut matches_service = format!(
        "ip daddr {} meta l4proto {{ udp, tcp }} th dport 53 goto cluster-dns",
        address_or_set(services)
    );
    let mut dnat = format!(
        "meta nfproto ipv4 dnat ip to numgen inc mod {} map {{ {} }}",
        endpoints.len(),
        endpoint_map(endpoints)
    );
    if !endpoints_v6.is_empty() {
        matches_service.push_str(&format!(
            "\n\t\tip6 daddr {CLUSTER_DNS_V6} meta l4proto {{ udp, tcp }} th dport 53 goto cluster-dns"
        ));
        dnat.push_str(&format!(
            "\n\t\tmeta nfproto ipv6 dnat ip6 to numgen inc mod {} map {{ {} }}",
            endpoints_v6.len(),
            endpoint_map(endpoints_v6)
        ));
    }
    format!(
        "table inet dnsloop-lab-kube-proxy {{
\tchain cluster-dns {{
\t\t{dnat}
\t}}
\tchain prerouting {{
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\t{matches_service}
\t}}
\tchain output {{
\t\t# nft 1.0.6 accepts the `dstnat` keyword only on prerouting; -100 is the same priority.
\t\ttype nat hook output priority -100; policy accept;
\t\t{matches_service}
\t}}
}}
"
    )
}

/// `a` for one address, `{ a, b }` for several.
fn address_or_set(addresses: &[impl Display]) -> String {
    match addresses {
        [one] => one.to_string(),
        several => format!(
            "{{ {} }}",
            several
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// node-local-dns's NOTRACK rules in iptables mode: DNS to and from `addresses` (its own and
/// the kube-dns ClusterIP it took over) skips conntrack, so kube-proxy's DNAT of the ClusterIP
/// never applies and a pod's query is delivered to the node's own cache. In the raw table,
/// before conntrack, on prerouting (from pods) and output (the node's own, and the cache's
/// answers).
pub(crate) fn node_local_dns_notrack(addresses: &[Ipv4Addr]) -> String {
    let addresses = address_or_set(addresses);
    let rules = format!(
        "ip daddr {addresses} meta l4proto {{ udp, tcp }} th dport 53 notrack
		ip saddr {addresses} meta l4proto {{ udp, tcp }} th sport 53 notrack"
    );
    format!(
        "table inet dnsloop-lab-nodelocaldns {{
	chain prerouting {{
		type filter hook prerouting priority raw; policy accept;
		{rules}
	}}
	chain output {{
		type filter hook output priority raw; policy accept;
		{rules}
	}}
}}
"
    )
}

/// `0 : a, 1 : b, ...` for numgen's map.
fn endpoint_map(endpoints: &[impl Display]) -> String {
    endpoints
        .iter()
        .enumerate()
        .map(|(index, endpoint)| format!("{index} : {endpoint}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What flannel and kube-proxy masquerade on a node of a multi-node lab: the node's own
/// traffic into the overlay (a query the node cache sends to the ClusterIP left with the
/// uplink's address, chosen before the DNAT) takes the overlay address, so the reply comes back
/// over the overlay; and link-local sources leaving by the uplink (169.254.25.10 is every
/// node's, so the upstream cannot route it back to one).
pub(crate) fn node_masquerade() -> String {
    format!(
        "table inet dnsloop-lab-masquerade {{
\tchain postrouting {{
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\toifname \"{OVERLAY_DEVICE}\" ip saddr != {CLUSTER_POD_NETWORK} masquerade
\t\toifname \"{UPLINK_DEVICE}\" ip saddr {NODE_LOCAL_NET} masquerade
\t}}
}}
"
    )
}

/// Silently drops everything sent to `address`, so a query to it neither gets an answer nor an
/// ICMP error: the client can only time out, as with a server that is gone.
pub(crate) fn black_hole(address: Ipv4Addr) -> String {
    format!(
        "table inet dnsloop-lab-black-hole {{
\tchain input {{
\t\ttype filter hook input priority filter; policy accept;
\t\tip daddr {address} drop
\t}}
}}
"
    )
}

/// Writes `ruleset` to `file` (kept for debugging) and loads it in `namespace`.
pub(crate) fn load(namespace: &str, ruleset: &str, file: &Path) -> Result<()> {
    fs::write(file, ruleset).with_context(|| format!("writing {}", file.display()))?;
    let file = file.to_string_lossy();
    command::run(&ip_netns::exec_argv(namespace, &["nft", "-f", &file]))
        .with_context(|| format!("loading nftables rules {file} in {namespace}"))?;
    Ok(())
}
