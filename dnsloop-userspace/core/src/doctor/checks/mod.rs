//! The checks: each module looks at one part of the [`Node`] snapshot and says what it found,
//! `ok` included, so that a report shows what was looked at and not only what failed.
mod bridge;
mod conntrack;
mod corefile;
mod kubelet;
mod nameservers;
mod search;
mod upstream;

use std::net::IpAddr;

use super::{
    address,
    check::{Check, Location},
    node::Node,
    read::corefile::{Corefile, Forward, Target},
};

pub fn run(node: &Node) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.extend(kubelet::check(node));
    checks.extend(nameservers::check(node));
    checks.extend(upstream::check(node));
    checks.extend(corefile::check(node));
    checks.extend(search::check(node));
    checks.extend(bridge::check(node));
    checks.extend(conntrack::check(node));
    checks
}

/// The path a `forward` reads inside a CoreDNS or node-local-dns container that is the
/// resolv.conf kubelet wrote for it (both run with `dnsPolicy: Default`).
const CONTAINER_RESOLV_CONF: &str = "/etc/resolv.conf";

/// node-local-dns's template word that node-cache replaces at startup with the upstreams from
/// its own /etc/resolv.conf.
const UPSTREAM_SERVERS_PLACEHOLDER: &str = "__PILLAR__UPSTREAM__SERVERS__";

/// A `forward` that sends queries to the servers of the resolv.conf kubelet hands to pods.
pub struct ResolvConfForward<'a> {
    pub corefile: &'a Corefile,
    pub location: Location,
    pub forward: Forward,
}

impl ResolvConfForward<'_> {
    /// `coredns.yaml:21 (forward . /etc/resolv.conf)`.
    pub fn describe(&self) -> String {
        format!("{} (`{}`)", self.location, self.forward.describe())
    }
}

pub fn resolv_conf_forwards(node: &Node) -> Vec<ResolvConfForward<'_>> {
    let mut found = Vec::new();
    for corefile in &node.corefiles {
        for server in corefile.server_blocks() {
            for forward in server.forwards() {
                let reads_resolv_conf = forward.targets.iter().any(|target| match target {
                    Target::File(path) => path == CONTAINER_RESOLV_CONF,
                    Target::Other(text) => text == UPSTREAM_SERVERS_PLACEHOLDER,
                    Target::Address { .. } => false,
                });
                if reads_resolv_conf {
                    found.push(ResolvConfForward {
                        corefile,
                        location: Location::line(&corefile.name, forward.line),
                        forward,
                    });
                }
            }
        }
    }
    found
}

/// Why an address is node-local-dns's, when doctor can tell.
pub fn node_local_dns_evidence(node: &Node, candidate: IpAddr) -> Option<String> {
    for corefile in node.corefiles.iter().filter(|c| c.is_node_local_dns()) {
        if let Some(line) = corefile.bind_line(candidate) {
            return Some(format!(
                "node-local-dns binds it in {}:{line}",
                corefile.name
            ));
        }
    }
    if let Some(cluster_dns) = &node.kubelet.cluster_dns {
        if cluster_dns.addresses.contains(&candidate) && address::is_link_local(candidate) {
            return Some(format!(
                "kubelet's clusterDNS sends pods to it ({})",
                cluster_dns.origin
            ));
        }
    }
    address::is_usual_node_local_dns(candidate)
        .then(|| "it is node-local-dns's usual address".to_string())
}

/// `a`, `a and b`, `a, b and c`.
pub fn list<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    match items.as_slice() {
        [] => String::new(),
        [only] => only.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// `1 domain`, `2 domains`.
pub fn count(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_english() {
        assert_eq!(list::<&str>(&[]), "");
        assert_eq!(list(&["a"]), "a");
        assert_eq!(list(&["a", "b"]), "a and b");
        assert_eq!(list(&["a", "b", "c"]), "a, b and c");
        assert_eq!(count(1, "domain", "domains"), "1 domain");
        assert_eq!(count(7, "domain", "domains"), "7 domains");
    }
}
