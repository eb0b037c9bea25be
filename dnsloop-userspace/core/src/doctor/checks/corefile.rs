//! Where each Corefile's `forward`s lead, whether a block that forwards still has the `loop`
//! plugin, whether it raises the EDNS buffer size past what fits every path, and template
//! words left unrendered.
//!
//! A forward target loops when it leads back to the server itself:
//! - an address the same Corefile `bind`s, on the same port;
//! - a loopback address: inside a CoreDNS pod that is CoreDNS itself; node-local-dns runs on
//!   the host network, where it is the node's own resolver (a loop only if that resolver
//!   forwards to the cluster, so a warning);
//! - node-local-dns's link-local address, from CoreDNS: node-local-dns sends cache misses to
//!   CoreDNS, so they come back;
//! - the cluster DNS Service's ClusterIP, from CoreDNS: kube-proxy DNATs it to a CoreDNS pod.
//!
//! The cluster DNS ClusterIPs are kubelet's `clusterDNS` entries that are not link-local (a
//! link-local one is node-local-dns's address: kubespray points kubelet there), and where a
//! node-local-dns Corefile's cluster-domain block forwards (kubespray: `forward . 10.233.0.3`).
//! node-local-dns forwarding there is its job. In iptables mode node-local-dns also binds that
//! ClusterIP (`bind 169.254.20.10 10.96.0.10`) to take pods' queries before kube-proxy does, so
//! it must then forward to another Service (`kube-dns-upstream`, the template's
//! `__PILLAR__CLUSTER__DNS__`): forwarding to an address it binds is the first rule's loop.
use std::net::{IpAddr, SocketAddr};

use super::node_local_dns_evidence;
use crate::doctor::{
    address,
    check::{Check, Location, Severity},
    node::Node,
    read::corefile::{Corefile, Forward, ServerBlock, Target},
};

const SYNTAX: &str = "corefile.syntax";
const TEMPLATE: &str = "corefile.template";
const SELF: &str = "corefile.forward-self";
const LOOPBACK: &str = "corefile.forward-loopback";
const LINK_LOCAL: &str = "corefile.forward-link-local";
const CLUSTER_DNS: &str = "corefile.forward-cluster-dns";
const UNCHECKED: &str = "corefile.forward-unchecked";
const NO_LOOP_PLUGIN: &str = "corefile.no-loop-plugin";
const FORWARDS: &str = "corefile.forwards";
const LARGE_BUFSIZE: &str = "corefile.large-bufsize";
/// The largest UDP reply that fits every path without IP fragments (DNS Flag Day 2020), and
/// the size CoreDNS's `bufsize` plugin sets when given none.
const FITS_EVERY_PATH: u16 = 1232;

/// Template words node-cache fills in at startup, and with what.
const RUNTIME_PLACEHOLDERS: [(&str, &str); 2] = [
    (
        "__PILLAR__CLUSTER__DNS__",
        "the kube-dns-upstream Service's ClusterIP",
    ),
    (
        "__PILLAR__UPSTREAM__SERVERS__",
        "the nameservers of its /etc/resolv.conf, the file kubelet hands to pods",
    ),
];

pub fn check(node: &Node) -> Vec<Check> {
    let cluster_dns = cluster_dns_addresses(node);
    node.corefiles
        .iter()
        .flat_map(|corefile| corefile_checks(node, corefile, &cluster_dns))
        .collect()
}

fn cluster_dns_addresses(node: &Node) -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = node
        .kubelet
        .cluster_dns
        .iter()
        .flat_map(|dns| dns.addresses.iter().copied())
        .filter(|address| !address::is_link_local(*address))
        .collect();
    let cluster_domain = node.kubelet.cluster_domain.value.trim_end_matches('.');
    for corefile in node.corefiles.iter().filter(|c| c.is_node_local_dns()) {
        for server in corefile.server_blocks() {
            let serves_cluster_domain = server
                .keys
                .iter()
                .any(|key| key.zone.trim_end_matches('.') == cluster_domain);
            if !serves_cluster_domain {
                continue;
            }
            for forward in server.forwards() {
                for target in &forward.targets {
                    if let Target::Address { address, .. } = target {
                        let ip = address.ip();
                        if !address::is_link_local(ip)
                            && !address::is_loopback(ip)
                            && !addresses.contains(&ip)
                        {
                            addresses.push(ip);
                        }
                    }
                }
            }
        }
    }
    addresses
}

/// An address a Corefile listens on: its `bind`, on its server block's port.
struct OwnAddress {
    address: IpAddr,
    port: Option<u16>,
    line: u32,
}

fn corefile_checks(node: &Node, corefile: &Corefile, cluster_dns: &[IpAddr]) -> Vec<Check> {
    let mut checks = templates(corefile);
    let servers = match &corefile.servers {
        Ok(servers) => servers,
        Err(error) => {
            checks.push(
                Check::new(
                    SYNTAX,
                    Severity::Error,
                    corefile.name.clone(),
                    format!("CoreDNS cannot parse this Corefile: {error}, so it fails to start on it (with `reload`, it keeps running the previous one)"),
                )
                .fix("fix the braces or quotes at this line; until then doctor cannot check the Corefile's forwards")
                .at(Location::line(&corefile.name, error.line)),
            );
            return checks;
        }
    };
    let own: Vec<OwnAddress> = servers
        .iter()
        .flat_map(|server| {
            server.binds().into_iter().filter_map(|bind| {
                Some(OwnAddress {
                    address: bind.address?,
                    port: server.port(),
                    line: bind.line,
                })
            })
        })
        .collect();
    let context = Context {
        node,
        corefile,
        node_local: corefile.is_node_local_dns(),
        own,
        server_ports: servers.iter().filter_map(ServerBlock::port).collect(),
        cluster_dns,
    };
    let mut forward_count = 0;
    let mut target_checks = Vec::new();
    for server in servers {
        let forwards = server.forwards();
        for forward in &forwards {
            forward_count += 1;
            for target in &forward.targets {
                target_checks.extend(context.target(server, forward, target));
            }
        }
        if let Some(first) = forwards.first() {
            if !server.has_plugin("loop") {
                checks.push(no_loop_plugin(corefile, server, first));
            }
            checks.extend(large_bufsize(corefile, server));
        }
    }
    let loops_found = target_checks
        .iter()
        .any(|check| matches!(check.severity, Severity::Error | Severity::Warning));
    checks.extend(target_checks);
    if forward_count > 0 && !loops_found {
        checks.push(
            Check::new(
                FORWARDS,
                Severity::Ok,
                corefile.name.clone(),
                format!(
                    "{} in this {} Corefile, and no address named there leads back to the server itself, a loopback or {} (a forward to /etc/resolv.conf is checked through kubelet's file)",
                    super::count(forward_count, "forward", "forwards"),
                    context.kind(),
                    if context.node_local { "another node-local-dns address" } else { "the cluster DNS" }
                ),
            )
            .at(Location::file(&corefile.name)),
        );
    }
    checks
}

struct Context<'a> {
    node: &'a Node,
    corefile: &'a Corefile,
    node_local: bool,
    own: Vec<OwnAddress>,
    /// The ports the Corefile's server blocks listen on: a loopback target on one of them, in
    /// CoreDNS's own network namespace, is CoreDNS.
    server_ports: Vec<u16>,
    cluster_dns: &'a [IpAddr],
}

impl Context<'_> {
    fn kind(&self) -> &'static str {
        if self.node_local {
            "node-local-dns"
        } else {
            "CoreDNS"
        }
    }

    /// What `target`, one of `forward`'s in `server`, leads to, when that is worth a check.
    fn target(&self, server: &ServerBlock, forward: &Forward, target: &Target) -> Option<Check> {
        let fault = self.fault(target)?;
        Some(self.describe(fault, server, forward, target))
    }

    /// Where `target` leads, when that is a loop or a place doctor cannot follow.
    fn fault<'t>(&self, target: &'t Target) -> Option<TargetFault<'t>> {
        let address = match target {
            Target::Address { address, .. } => *address,
            // The resolv.conf checks follow /etc/resolv.conf to kubelet's file.
            Target::File(path) if path == super::CONTAINER_RESOLV_CONF => return None,
            Target::File(path) => return Some(TargetFault::UnseenFile(path)),
            // Template words are the template check's.
            Target::Other(text) if text.contains("__PILLAR__") => return None,
            Target::Other(text) => return Some(TargetFault::Unknown(text)),
        };
        let ip = address.ip();
        if let Some(own) = self
            .own
            .iter()
            .find(|own| own.address == ip && own.port.is_none_or(|port| port == address.port()))
        {
            return Some(TargetFault::OwnAddress {
                address,
                line: own.line,
                taken_cluster_ip: self.node_local && self.cluster_dns.contains(&ip),
            });
        }
        if address::is_loopback(ip) {
            return Some(if self.node_local {
                TargetFault::NodeResolver(address)
            } else if self.server_ports.contains(&address.port()) {
                TargetFault::CoreDnsItself(address)
            } else {
                TargetFault::PodLoopback(address)
            });
        }
        if address::is_link_local(ip) && address::cloud_resolver(ip).is_none() {
            return Some(if self.node_local {
                TargetFault::OtherLinkLocal(ip)
            } else {
                TargetFault::NodeLocalDns {
                    ip,
                    evidence: node_local_dns_evidence(self.node, ip),
                }
            });
        }
        (!self.node_local && self.cluster_dns.contains(&ip)).then_some(TargetFault::ClusterDns(ip))
    }

    /// The check that says `fault`, found at `target` of `forward` in `server`: every target's
    /// message and fix are here.
    fn describe(
        &self,
        fault: TargetFault,
        server: &ServerBlock,
        forward: &Forward,
        target: &Target,
    ) -> Check {
        let subject = format!("{} {} {}", forward.plugin, forward.from, target.text());
        let block = server.label();
        let kind = self.kind();
        let (id, severity, summary, fix): (_, _, String, Option<String>) = match fault {
            TargetFault::UnseenFile(path) => (
                UNCHECKED,
                Severity::Info,
                format!("`{subject}` in server block {block} reads {path} inside the {kind} container, a file doctor cannot see, so its nameservers are not checked"),
                Some(format!("check that {path} lists real upstream servers: no loopback and no node-local-dns address")),
            ),
            TargetFault::Unknown(text) => (
                UNCHECKED,
                Severity::Info,
                format!("`{subject}` in server block {block}: {text} is neither an address nor a path, so doctor cannot tell where it leads"),
                None,
            ),
            TargetFault::OwnAddress {
                address,
                line,
                taken_cluster_ip,
            } => (
                SELF,
                Severity::Error,
                format!("`{subject}` in server block {block} sends queries to {address}, which this {kind} listens on itself (bind, line {line}): every forwarded query comes back to it"),
                Some(if taken_cluster_ip {
                    let ip = address.ip();
                    format!("forward to the kube-dns-upstream Service's ClusterIP (the template's __PILLAR__CLUSTER__DNS__, which node-cache fills in), not to {ip}, which node-local-dns takes over")
                } else {
                    "forward to the upstream servers' addresses, not to an address this server listens on".to_string()
                }),
            ),
            TargetFault::NodeResolver(address) => (
                LOOPBACK,
                Severity::Warning,
                format!("`{subject}` in server block {block} sends queries to {address}, {} on the node (node-local-dns uses the host network): a loop if that resolver sends them back to the cluster DNS", address::loopback_listener(address.ip())),
                Some("forward to the upstream servers' addresses, so that node-local-dns does not depend on the node's own resolver".into()),
            ),
            TargetFault::CoreDnsItself(address) => (
                LOOPBACK,
                Severity::Error,
                format!("`{subject}` in server block {block} sends queries to {address}, which inside the CoreDNS pod is CoreDNS itself (not {} on the node): a forwarding loop", address::loopback_listener(address.ip())),
                Some("forward to the upstream servers' addresses (or to /etc/resolv.conf, with kubelet's resolvConf listing real upstreams)".into()),
            ),
            TargetFault::PodLoopback(address) => (
                LOOPBACK,
                Severity::Warning,
                format!("`{subject}` in server block {block} sends queries to {address} inside the CoreDNS pod, where only a sidecar container could answer, not a server on the node: without one every query there fails"),
                Some("forward to an address the CoreDNS pod can reach: the server's node or Service IP".into()),
            ),
            TargetFault::OtherLinkLocal(ip) => (
                LINK_LOCAL,
                Severity::Warning,
                format!("`{subject}` in server block {block} sends queries to {ip}, a link-local address this Corefile does not bind: if it is another node-local-dns address, queries come back here"),
                Some("forward to the cluster DNS Service for cluster names and to the upstream servers' addresses for the rest".into()),
            ),
            TargetFault::NodeLocalDns { ip, evidence } => {
                let (severity, whose) = match &evidence {
                    Some(evidence) => (
                        Severity::Error,
                        format!("node-local-dns's address ({evidence})"),
                    ),
                    None => (
                        Severity::Warning,
                        "a link-local address, where node-local-dns usually listens".to_string(),
                    ),
                };
                (
                    LINK_LOCAL,
                    severity,
                    format!("`{subject}` in server block {block} sends queries to {ip}, {whose}: node-local-dns sends cache misses to CoreDNS, so they come back"),
                    Some("forward to the upstream servers' addresses; only pods and the node should ask node-local-dns".into()),
                )
            }
            TargetFault::ClusterDns(ip) => (
                CLUSTER_DNS,
                Severity::Error,
                format!("`{subject}` in server block {block} sends queries to {ip}, the cluster DNS Service's ClusterIP, which kube-proxy sends to a CoreDNS pod: a forwarding loop"),
                Some("forward to the upstream servers' addresses; only node-local-dns forwards to the cluster DNS Service".into()),
            ),
        };
        let check = Check::new(id, severity, subject, summary);
        let check = match fix {
            Some(fix) => check.fix(fix),
            None => check,
        };
        check.at(Location::line(&self.corefile.name, forward.line))
    }
}

/// Where a forward target leads, when doctor has something to say of it: found by
/// `Context::fault`, worded by `Context::describe`.
enum TargetFault<'a> {
    /// A file inside the container (other than /etc/resolv.conf), which doctor cannot see.
    UnseenFile(&'a str),
    /// Neither an address nor a path.
    Unknown(&'a str),
    /// An address the Corefile binds (on `line`), on the same port; `taken_cluster_ip` when it
    /// is the cluster DNS ClusterIP that node-local-dns takes over.
    OwnAddress {
        address: SocketAddr,
        line: u32,
        taken_cluster_ip: bool,
    },
    /// A loopback address, from node-local-dns on the host network: the node's own resolver.
    NodeResolver(SocketAddr),
    /// A loopback address on a port the Corefile serves, inside the CoreDNS pod: CoreDNS.
    CoreDnsItself(SocketAddr),
    /// A loopback address on another port, inside the CoreDNS pod: only a sidecar there.
    PodLoopback(SocketAddr),
    /// A link-local address the Corefile does not bind, from node-local-dns.
    OtherLinkLocal(IpAddr),
    /// A link-local address, from CoreDNS: node-local-dns's, with the evidence when doctor
    /// found some.
    NodeLocalDns {
        ip: IpAddr,
        evidence: Option<String>,
    },
    /// The cluster DNS Service's ClusterIP, from CoreDNS.
    ClusterDns(IpAddr),
}

/// A block serving `.` forwards every external name: a loop there takes the whole server
/// down, and that is the block people strip `loop` from to stop a CrashLoopBackOff (field
/// report 002). A stub domain's block rarely has `loop`, and a loop there stays in its zone.
fn no_loop_plugin(corefile: &Corefile, server: &ServerBlock, forward: &Forward) -> Check {
    let serves_root = server.keys.iter().any(|key| key.zone == ".");
    let check = Check::new(
        NO_LOOP_PLUGIN,
        if serves_root { Severity::Warning } else { Severity::Info },
        format!("server block {}", server.label()),
        format!(
            "server block {} forwards (`{}`) without the loop plugin, so a forwarding loop {} does not stop the server at startup: it goes on silently, burning CPU and memory",
            server.label(),
            forward.describe(),
            if serves_root { "of external names" } else { "in this zone" }
        ),
    )
    .at(Location::line(&corefile.name, server.line));
    if serves_root {
        check.fix("add `loop` back to the block, and fix the loop it reported instead of hiding it (see the other checks)")
    } else {
        check.fix("add `loop` to the block to have a loop in this zone stop the server at startup")
    }
}

/// `bufsize` above 1232 in a block that forwards: the queries it sends on invite replies that
/// may not fit the path to the upstream. Only a risk: whether the path drops fragments is not
/// in any file; `dnsloop trace` sees the replies lost (`fragmented_reply_lost`). A block
/// without `bufsize` passes its clients' sizes on, which most clients keep to 1232 or less.
fn large_bufsize(corefile: &Corefile, server: &ServerBlock) -> Option<Check> {
    let (directive, size) = server
        .directives
        .iter()
        .filter(|directive| directive.name == "bufsize")
        .find_map(|directive| Some((directive, directive.args.first()?.parse::<u16>().ok()?)))?;
    (size > FITS_EVERY_PATH).then(|| {
        Check::new(
            LARGE_BUFSIZE,
            Severity::Info,
            format!("server block {}", server.label()),
            format!(
                "server block {} forwards with `bufsize {size}`: its upstreams may answer with up to {size} bytes over UDP, more than fits a path of MTU 1280 (1232 bytes of DNS); such a reply goes in IP fragments, and where a network drops fragments it is lost and the lookup fails. A risk, not a fault: whether fragments are dropped is not in any file (`dnsloop trace` reports replies lost to fragmentation)",
                server.label(),
            ),
        )
        .fix(format!("use `bufsize {FITS_EVERY_PATH}` (the plugin's default size) unless every path to the upstreams passes IP fragments"))
        .at(Location::line(&corefile.name, directive.line))
    })
}

fn templates(corefile: &Corefile) -> Vec<Check> {
    corefile
        .placeholders
        .iter()
        .map(|(name, line)| {
            let at = Location::line(&corefile.name, *line);
            match RUNTIME_PLACEHOLDERS.iter().find(|(known, _)| known == name) {
                Some((_, filled_with)) => Check::new(
                    TEMPLATE,
                    Severity::Info,
                    name.clone(),
                    format!("{name} is a node-local-dns template word that node-cache fills in at startup with {filled_with}, a value doctor does not see here"),
                )
                .at(at),
                None => Check::new(
                    TEMPLATE,
                    Severity::Warning,
                    name.clone(),
                    format!("{name} is a node-local-dns template word left unrendered: node-cache does not fill it in, so node-local-dns loads a broken Corefile"),
                )
                .fix("substitute it when deploying, as the manifest's instructions do: __PILLAR__LOCAL__DNS__ with the link-local address (169.254.20.10), __PILLAR__DNS__SERVER__ with the kube-dns ClusterIP, __PILLAR__DNS__DOMAIN__ with the cluster domain")
                .at(at),
            }
        })
        .collect()
}
