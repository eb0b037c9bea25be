//! kubelet's DNS settings: what it hands to pods and whether it can.
use super::{list, resolv_conf_forwards};
use crate::doctor::{
    check::{Check, Location, Severity},
    node::{Node, PodResolv},
    read::{
        kubelet::{ConfigFile, CONFIG_FILES},
        root::Unavailable,
    },
};

const CONFIG: &str = "kubelet.config";
const RESOLV_CONF: &str = "kubelet.resolv-conf";
const CLUSTER_DNS: &str = "kubelet.cluster-dns";

pub fn check(node: &Node) -> Vec<Check> {
    let mut checks = vec![config(node)];
    checks.extend(resolv_conf(node));
    checks.extend(cluster_dns(node));
    checks
}

fn config(node: &Node) -> Check {
    let kubelet = &node.kubelet;
    match &kubelet.config {
        ConfigFile::Found { file } => {
            let resolv_conf = match &kubelet.resolv_conf.origin {
                Some(_) if kubelet.resolv_conf.value.is_empty() => "nothing (resolvConf is empty)".to_string(),
                Some(_) => format!("{} (resolvConf)", kubelet.resolv_conf.value),
                None => format!("{} (resolvConf, by default)", kubelet.resolv_conf.value),
            };
            let cluster_dns = match &kubelet.cluster_dns {
                Some(dns) if !dns.addresses.is_empty() => list(&dns.addresses),
                _ => "nowhere (no clusterDNS)".to_string(),
            };
            Check::new(
                CONFIG,
                Severity::Info,
                "kubelet",
                format!(
                    "kubelet hands pods {resolv_conf}, sends ClusterFirst pods to {cluster_dns} and appends the cluster domain {}",
                    kubelet.cluster_domain.value
                ),
            )
            .at(Location::file(file))
        }
        ConfigFile::NotFound => Check::new(
            CONFIG,
            if kubelet.is_configured() { Severity::Info } else { Severity::Warning },
            "kubelet",
            format!(
                "no kubelet config in {}: the checks assume kubelet's defaults (resolvConf {})",
                list(&CONFIG_FILES),
                kubelet.resolv_conf.value
            ),
        )
        .fix("if kubelet keeps its config elsewhere (k3s, a managed node image), check its resolvConf and clusterDNS by hand"),
        ConfigFile::Unusable { file, reason } => Check::new(
            CONFIG,
            Severity::Warning,
            "kubelet",
            format!("{file} cannot be read as a KubeletConfiguration ({reason}): the checks assume kubelet's defaults"),
        )
        .fix(format!("check that {file} is kubelet's YAML config: a kubelet started with it fails too"))
        .at(Location::file(file)),
    }
}

fn resolv_conf(node: &Node) -> Option<Check> {
    let kubelet = &node.kubelet;
    let pod = match &node.pod_resolv {
        PodResolv::Disabled => {
            let forwards = resolv_conf_forwards(node);
            let (severity, consequence) = match forwards.first() {
                Some(forward) => (
                    Severity::Error,
                    format!("CoreDNS's {} queries itself", forward.describe()),
                ),
                None => (
                    Severity::Warning,
                    "CoreDNS forwarding to /etc/resolv.conf would query itself".to_string(),
                ),
            };
            return Some(
                Check::new(
                    RESOLV_CONF,
                    severity,
                    "resolvConf \"\"",
                    format!("kubelet's resolvConf is empty, so it gives pods with dnsPolicy Default (CoreDNS among them) `nameserver 127.0.0.1`, their own loopback: {consequence}"),
                )
                .fix(format!("set resolvConf in {} to a file listing the real upstream servers (/etc/resolv.conf, or /run/systemd/resolve/resolv.conf under systemd-resolved)", kubelet.config_file()))
                .at_opt(kubelet.resolv_conf.origin.clone()),
            );
        }
        PodResolv::File(pod) => pod,
    };
    // Without kubelet's config the default path is only an assumption; /etc/resolv.conf itself
    // is the nameserver checks' to report.
    if !kubelet.is_configured() {
        return None;
    }
    let why = pod.content.as_ref().err()?;
    let described = node.why_unavailable(pod, why);
    let check = match why {
        Unavailable::Missing if node.run_is_empty && pod.file.path.starts_with("/run/") => Check::new(
            RESOLV_CONF,
            Severity::Info,
            pod.file.asked.clone(),
            format!("kubelet's resolvConf: {described}; not checked"),
        ),
        Unavailable::Missing => Check::new(
            RESOLV_CONF,
            Severity::Error,
            pod.file.asked.clone(),
            format!("kubelet's resolvConf: {described}, so kubelet cannot write pods' resolv.conf and new pods fail to start (\"Failed to create pod sandbox: open {}\")", pod.file.asked),
        )
        .fix(format!("point resolvConf in {} at a file that exists (/run/systemd/resolve/resolv.conf only while systemd-resolved runs; otherwise /etc/resolv.conf)", kubelet.config_file())),
        Unavailable::Unreadable(_) => Check::new(
            RESOLV_CONF,
            Severity::Warning,
            pod.file.asked.clone(),
            format!("kubelet's resolvConf: {described}"),
        )
        .fix("make it a readable file listing the upstream servers"),
    };
    Some(check.at_opt(kubelet.resolv_conf.origin.clone()))
}

fn cluster_dns(node: &Node) -> Vec<Check> {
    let kubelet = &node.kubelet;
    let config = kubelet.config_file();
    if !kubelet.is_configured() {
        return Vec::new();
    }
    match &kubelet.cluster_dns {
        Some(dns) if !dns.invalid.is_empty() => dns
            .invalid
            .iter()
            .map(|entry| {
                Check::new(
                    CLUSTER_DNS,
                    Severity::Error,
                    format!("clusterDNS {entry}"),
                    format!("clusterDNS entry {entry:?} is not an IP address: kubelet refuses to start with it"),
                )
                .fix(format!("write the kube-dns Service's ClusterIP (or node-local-dns's address) in {config}"))
                .at(dns.origin.clone())
            })
            .collect(),
        Some(dns) if !dns.addresses.is_empty() => Vec::new(),
        _ => vec![Check::new(
            CLUSTER_DNS,
            Severity::Warning,
            "clusterDNS",
            "kubelet has no clusterDNS: pods with dnsPolicy ClusterFirst fall back to Default and cannot resolve Services",
        )
        .fix(format!("set clusterDNS in {config} to the kube-dns Service's ClusterIP (or node-local-dns's address)"))
        .at(Location::file(config))],
    }
}
