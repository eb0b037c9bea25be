//! Upstreams that lead back into the cluster: a loopback or node-local-dns nameserver in the
//! resolv.conf kubelet hands to pods. CoreDNS runs with `dnsPolicy: Default`, so that file is
//! its /etc/resolv.conf, and `forward . /etc/resolv.conf` sends external names there.
//!
//! - A loopback address inside CoreDNS's pod is CoreDNS itself (field reports 000, 002, 003).
//! - node-local-dns's link-local address sends the query back to CoreDNS (the kubespray
//!   `resolvconf_mode: host_resolvconf` loop, field report 001).
use std::net::IpAddr;

use super::{list, node_local_dns_evidence, resolv_conf_forwards, ResolvConfForward};
use crate::doctor::{
    address,
    check::{Check, Location, Severity},
    node::{Node, SYSTEMD_RESOLV_CONF},
    read::{
        resolv_conf::{Nameserver, ResolvConf},
        root::ReadFile,
    },
};

const LOOPBACK: &str = "resolv.loopback-upstream";
const LINK_LOCAL: &str = "resolv.link-local-upstream";

pub fn check(node: &Node) -> Vec<Check> {
    // A pod file that is missing or disabled is the kubelet checks' to report.
    let Some(pod) = node.pod_resolv.file() else {
        return Vec::new();
    };
    let Some(conf) = pod.found() else {
        return Vec::new();
    };
    let forwards = resolv_conf_forwards(node);
    let mut checks = loopback(node, pod, conf, &forwards);
    checks.extend(link_local(node, pod, conf, &forwards));
    checks
}

fn loopback(
    node: &Node,
    pod: &ReadFile<ResolvConf>,
    conf: &ResolvConf,
    forwards: &[ResolvConfForward],
) -> Vec<Check> {
    let looped: Vec<&Nameserver> = conf
        .nameservers
        .iter()
        .filter(|ns| address::is_loopback(ns.address))
        .collect();
    if looped.is_empty() {
        return vec![loopback_ok(node, pod)];
    }
    let (severity, handed) = handed_to_pods(node);
    looped
        .into_iter()
        .map(|ns| {
            let listener = address::loopback_listener(ns.address);
            let consequence = match forwards.first() {
                Some(forward) => format!(
                    "CoreDNS's {} sends external names to its own loopback",
                    forward.describe()
                ),
                None => "CoreDNS forwarding to /etc/resolv.conf sends external names to its own loopback".into(),
            };
            Check::new(
                LOOPBACK,
                severity,
                format!("nameserver {}", ns.address),
                format!(
                    "nameserver {} in {} is {listener}, and {handed}: {consequence}, a loop that CoreDNS's loop plugin answers with CrashLoopBackOff",
                    ns.address,
                    pod.file.describe()
                ),
            )
            .fix(loopback_fix(node, ns.address))
            .at(Location::line(&pod.file.path, ns.line))
        })
        .collect()
}

/// How sure doctor is that kubelet hands this file to pods, in words for a summary.
fn handed_to_pods(node: &Node) -> (Severity, String) {
    let kubelet = &node.kubelet;
    if kubelet.is_configured() {
        let how = match &kubelet.resolv_conf.origin {
            Some(origin) => format!("resolvConf, {origin}"),
            None => "its default resolvConf".into(),
        };
        (
            Severity::Error,
            format!("kubelet hands this file to pods ({how})"),
        )
    } else {
        (
            Severity::Warning,
            "kubelet hands this file to pods if it keeps its default resolvConf (no kubelet config found)".into(),
        )
    }
}

fn loopback_fix(node: &Node, looped: IpAddr) -> String {
    let config = node.kubelet.config_file();
    let restart = "then restart kubelet and delete the CoreDNS pods so that they get the new file";
    let real_upstreams: Vec<IpAddr> = node
        .systemd_resolv
        .found()
        .map(|conf| {
            conf.nameservers
                .iter()
                .map(|ns| ns.address)
                .filter(|address| !address::is_loopback(*address))
                .collect()
        })
        .unwrap_or_default();
    if !real_upstreams.is_empty() {
        format!(
            "set `resolvConf: {SYSTEMD_RESOLV_CONF}` in {config} (it lists the real upstreams: {}), {restart}",
            list(&real_upstreams)
        )
    } else if looped == IpAddr::from([127, 0, 0, 53]) {
        format!("set kubelet's resolvConf in {config} to a file listing the real upstream servers (systemd-resolved writes them to {SYSTEMD_RESOLV_CONF}), {restart}")
    } else {
        format!("set kubelet's resolvConf in {config} to a file listing the upstream servers that the local resolver on {looped} uses, not a loopback address, {restart}")
    }
}

fn loopback_ok(node: &Node, pod: &ReadFile<ResolvConf>) -> Check {
    let host_looped = node.host_resolv.found().and_then(|conf| {
        conf.nameservers
            .iter()
            .find(|ns| address::is_loopback(ns.address))
    });
    match host_looped {
        Some(ns) if !node.pods_get_host_resolv() => Check::new(
            LOOPBACK,
            Severity::Ok,
            format!("nameserver {}", ns.address),
            format!(
                "the node resolves through {} {}, but kubelet hands pods {}, which has no loopback nameserver",
                address::loopback_listener(ns.address),
                ns.address,
                pod.file.path
            ),
        )
        .at(Location::line(&node.host_resolv.file.path, ns.line)),
        _ => Check::new(
            LOOPBACK,
            Severity::Ok,
            pod.file.path.clone(),
            format!("no loopback nameserver in {}, the file kubelet hands to pods", pod.file.describe()),
        )
        .at(Location::file(&pod.file.path)),
    }
}

fn link_local(
    node: &Node,
    pod: &ReadFile<ResolvConf>,
    conf: &ResolvConf,
    forwards: &[ResolvConfForward],
) -> Vec<Check> {
    let local: Vec<&Nameserver> = conf
        .nameservers
        .iter()
        .filter(|ns| {
            address::is_link_local(ns.address) && address::cloud_resolver(ns.address).is_none()
        })
        .collect();
    if local.is_empty() {
        return vec![link_local_ok(node, pod)];
    }
    let (handed_severity, handed) = handed_to_pods(node);
    local
        .into_iter()
        .map(|ns| {
            let evidence = node_local_dns_evidence(node, ns.address);
            let whose = match &evidence {
                Some(evidence) => format!("is node-local-dns's own address ({evidence})"),
                None => "is link-local, where node-local-dns usually listens".to_string(),
            };
            // node-local-dns forwarding to a file that names itself loops at once (field
            // report 000); CoreDNS doing so loops through node-local-dns (report 001).
            let own = forwards
                .iter()
                .find(|forward| forward.corefile.bind_line(ns.address).is_some());
            let (severity, consequence) = if let Some(forward) = own {
                (
                    handed_severity,
                    format!(
                        "node-local-dns's {} sends external names straight back to itself",
                        forward.describe()
                    ),
                )
            } else if let Some(forward) = forwards.first() {
                (
                    handed_severity,
                    format!(
                        "{} sends external names back to node-local-dns, which hands them to CoreDNS again",
                        forward.describe()
                    ),
                )
            } else if node.corefiles.is_empty() {
                (
                    handed_severity,
                    "CoreDNS's default `forward . /etc/resolv.conf` sends external names back to node-local-dns, which hands them to CoreDNS again (give --corefile to confirm)".to_string(),
                )
            } else {
                (
                    Severity::Info,
                    "no given Corefile forwards to /etc/resolv.conf, so CoreDNS does not loop through it; pods with dnsPolicy Default still resolve through node-local-dns".to_string(),
                )
            };
            // An unidentified link-local server may be something else entirely: never an error.
            let severity = if evidence.is_none() && severity == Severity::Error {
                Severity::Warning
            } else {
                severity
            };
            let summary = if severity == Severity::Info {
                format!("nameserver {} in {} {whose}: {consequence}", ns.address, pod.file.describe())
            } else {
                format!(
                    "nameserver {} in {} {whose}, and {handed}: {consequence}, the kubespray `resolvconf_mode: host_resolvconf` loop",
                    ns.address,
                    pod.file.describe()
                )
            };
            let check = Check::new(LINK_LOCAL, severity, format!("nameserver {}", ns.address), summary)
                .at(Location::line(&pod.file.path, ns.line));
            if severity == Severity::Info {
                check
            } else {
                check.fix(format!(
                    "give kubelet's resolvConf (in {}) a file that lists the real upstream servers and not {} (kubespray: `resolvconf_mode: none`), or forward `.` to the upstreams' addresses in the Corefile; then restart kubelet and the CoreDNS and node-local-dns pods",
                    node.kubelet.config_file(),
                    ns.address
                ))
            }
        })
        .collect()
}

fn link_local_ok(node: &Node, pod: &ReadFile<ResolvConf>) -> Check {
    let host_local = node.host_resolv.found().and_then(|conf| {
        conf.nameservers.iter().find(|ns| {
            address::is_link_local(ns.address) && address::cloud_resolver(ns.address).is_none()
        })
    });
    match host_local {
        Some(ns) if !node.pods_get_host_resolv() => Check::new(
            LINK_LOCAL,
            Severity::Info,
            format!("nameserver {}", ns.address),
            format!(
                "the node resolves through {} (node-local-dns, by its link-local address), but kubelet hands pods {}, which does not: no loop, though the node's own lookups (image pulls among them) fail while node-local-dns is down, as after a reboot",
                ns.address, pod.file.path
            ),
        )
        .at(Location::line(&node.host_resolv.file.path, ns.line)),
        _ => Check::new(
            LINK_LOCAL,
            Severity::Ok,
            pod.file.path.clone(),
            format!(
                "no node-local-dns (link-local) nameserver in {}, the file kubelet hands to pods",
                pod.file.describe()
            ),
        )
        .at(Location::file(&pod.file.path)),
    }
}
