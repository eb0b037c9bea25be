//! nftables rulesets: the cluster DNS Service as kube-proxy would program it, and the drop rule
//! that makes the dead server dead.
use std::{fs, net::Ipv4Addr, path::Path};

use anyhow::{Context as _, Result};

use super::{
    command, netns,
    topology::{Pod, CLUSTER_DNS, CLUSTER_DNS_V6},
};

/// DNATs the cluster DNS ClusterIP (UDP and TCP port 53) to a random CoreDNS pod, in prerouting
/// (traffic from pods) and in output (the node's own resolver), like kube-proxy. Nothing is
/// masqueraded: pods see each other's real addresses.
pub(crate) fn cluster_dns_service() -> String {
    let [a, b] = Pod::COREDNS;
    let matches_service = format!(
        "ip daddr {CLUSTER_DNS} meta l4proto {{ udp, tcp }} th dport 53 goto cluster-dns\n\
         \t\tip6 daddr {CLUSTER_DNS_V6} meta l4proto {{ udp, tcp }} th dport 53 goto cluster-dns"
    );
    format!(
        "table inet dnsloop-lab-kube-proxy {{
\tchain cluster-dns {{
\t\tmeta nfproto ipv4 dnat ip to numgen random mod 2 map {{ 0 : {a4}, 1 : {b4} }}
\t\tmeta nfproto ipv6 dnat ip6 to numgen random mod 2 map {{ 0 : {a6}, 1 : {b6} }}
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
",
        a4 = a.ip(),
        b4 = b.ip(),
        a6 = a.ip6(),
        b6 = b.ip6(),
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
    command::run(&netns::exec_argv(namespace, &["nft", "-f", &file]))
        .with_context(|| format!("loading nftables rules {file} in {namespace}"))?;
    Ok(())
}
