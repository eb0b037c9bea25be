//! Whether the node's resolv.conf, and the one kubelet hands to pods, are usable at all: there,
//! with nameservers, no more than resolvers use, and each an address.
use super::list;
use crate::doctor::{
    check::{Check, Location, Severity},
    node::Node,
    read::{
        resolv_conf::ResolvConf,
        root::{ReadFile, Unavailable},
    },
};

const FILE: &str = "resolv.file";
const NO_NAMESERVER: &str = "resolv.no-nameserver";
const NAMESERVER_LIMIT: &str = "resolv.nameserver-limit";
const MALFORMED: &str = "resolv.malformed-nameserver";

/// glibc's `MAXNS`; kubelet keeps the same number for pods.
const MAX_NAMESERVERS: usize = 3;

pub fn check(node: &Node) -> Vec<Check> {
    let mut checks = host_file(node);
    let mut files = vec![&node.host_resolv];
    if let Some(pod) = node.pod_resolv.file() {
        if !node.pods_get_host_resolv() {
            files.push(pod);
        }
    }
    for file in files {
        if let Some(conf) = file.found() {
            checks.extend(usable(file, conf));
        }
    }
    checks
}

fn host_file(node: &Node) -> Vec<Check> {
    let host = &node.host_resolv;
    let Err(why) = &host.content else {
        return Vec::new();
    };
    let described = node.why_unavailable(host, why);
    let check = match why {
        Unavailable::Missing if node.run_is_empty && host.file.path.starts_with("/run/") => {
            Check::new(FILE, Severity::Info, host.file.asked.clone(), format!("{described}; not checked"))
        }
        _ => Check::new(
            FILE,
            Severity::Warning,
            host.file.asked.clone(),
            format!("{described}: the node has no resolver configuration, and nor do pods if kubelet hands them this file"),
        )
        .fix(match host.file.links.first() {
            Some(_) => "start the service that writes the symlink's target (systemd-resolved for /run/systemd/resolve/), or replace the symlink with a file listing the upstream servers",
            None => "write /etc/resolv.conf with the upstream servers",
        }),
    };
    vec![check.at(Location::file(&host.file.asked))]
}

fn usable(file: &ReadFile<ResolvConf>, conf: &ResolvConf) -> Vec<Check> {
    let path = &file.file.path;
    let mut checks = Vec::new();
    if conf.nameservers.is_empty() {
        checks.push(
            Check::new(
                NO_NAMESERVER,
                Severity::Warning,
                path.clone(),
                format!("{} lists no nameserver, so resolvers reading it ask 127.0.0.1, and CoreDNS given it refuses `forward . /etc/resolv.conf` (\"no nameservers found\")", file.file.describe()),
            )
            .fix("list the upstream servers in it (`nameserver ADDRESS`)")
            .at(Location::file(path)),
        );
    }
    if let Some(first_ignored) = conf.nameservers.get(MAX_NAMESERVERS) {
        let ignored: Vec<_> = conf.nameservers[MAX_NAMESERVERS..]
            .iter()
            .map(|ns| ns.address)
            .collect();
        checks.push(
            Check::new(
                NAMESERVER_LIMIT,
                Severity::Warning,
                format!("nameserver {}", first_ignored.address),
                format!(
                    "{} lists {} nameservers, but glibc and kubelet use only the first {MAX_NAMESERVERS} (kubelet logs \"Nameserver limits were exceeded\"), so {} {} never asked",
                    file.file.describe(),
                    conf.nameservers.len(),
                    list(&ignored),
                    if ignored.len() == 1 { "is" } else { "are" }
                ),
            )
            .fix(format!("keep at most {MAX_NAMESERVERS} nameservers, the ones that should be asked"))
            .at(Location::line(path, first_ignored.line)),
        );
    }
    for malformed in &conf.malformed_nameservers {
        checks.push(
            Check::new(
                MALFORMED,
                Severity::Warning,
                format!("nameserver {}", malformed.text),
                format!("`nameserver {}` in {} is not an IP address, so resolvers skip the line", malformed.text, file.file.describe()),
            )
            .fix("write the server's IP address (a name cannot be resolved before there is a resolver)")
            .at(Location::line(path, malformed.line)),
        );
    }
    checks
}
