//! Bridge netfilter: when pods sit on a Linux bridge (flannel's and the bridge plugin's cni0,
//! kubenet's cbr0), a CoreDNS reply to a pod on the same bridge is switched, not routed, so it
//! reaches iptables (and conntrack's un-DNAT of the ClusterIP) only through `br_netfilter` with
//! `bridge-nf-call-iptables=1`. Without it the client sees the reply come from the CoreDNS pod,
//! not from the ClusterIP it asked, and drops it ("reply from unexpected source", field report
//! 003). Routed CNIs (Calico, Cilium) have no bridge, and the setting does not matter.
use super::list;
use crate::doctor::{
    check::{Check, Location, Severity},
    node::Node,
    read::{
        bridges::{self, Bridge},
        root::{ReadFile, Unavailable},
    },
};

const NETFILTER: &str = "bridge.netfilter";
const MODULE_MISSING: &str = "bridge.br-netfilter-missing";
const CALL_IPTABLES: &str = "bridge.nf-call-iptables";
const CALL_IP6TABLES: &str = "bridge.nf-call-ip6tables";

pub fn check(node: &Node) -> Vec<Check> {
    found(node).into_iter().map(describe).collect()
}

/// What doctor found of bridge netfilter: found by `found`, worded by `describe`.
enum Found<'a> {
    /// The bridges cannot be listed, so whether pods sit on one is unknown.
    BridgesUnknown(&'a Unavailable),
    /// No bridge has ports (these are the bridges there are): pods are routed.
    NoPodBridges(&'a [Bridge]),
    /// Pods sit on these bridges, and the sysctls are not under the root.
    SysctlsUnseen(Vec<&'a Bridge>),
    /// Pods sit on these bridges, and br_netfilter is not loaded; nor is its module there,
    /// unless `module_present`.
    NotLoaded {
        pod_bridges: Vec<&'a Bridge>,
        module_present: bool,
    },
    /// A bridge-nf-call sysctl is 0 while pods sit on these bridges.
    SysctlOff {
        sysctl: Sysctl<'a>,
        pod_bridges: Vec<&'a Bridge>,
    },
    /// A bridge-nf-call sysctl is on.
    SysctlOn(Sysctl<'a>),
    /// A bridge-nf-call sysctl cannot be read as a number while pods sit on these bridges.
    SysctlUnreadable {
        sysctl: Sysctl<'a>,
        pod_bridges: Vec<&'a Bridge>,
    },
}

/// One of the bridge-nf-call sysctls, and what it being 0 costs.
struct Sysctl<'a> {
    id: &'static str,
    file: &'a ReadFile<String>,
    when_off: Severity,
    family: &'static str,
}

/// What doctor finds of bridge netfilter on `node`: one finding, or one per sysctl.
fn found(node: &Node) -> Vec<Found<'_>> {
    let netfilter = &node.bridges;
    let bridges = match &netfilter.bridges {
        Ok(bridges) => bridges,
        Err(why) => return vec![Found::BridgesUnknown(why)],
    };
    let pod_bridges: Vec<&Bridge> = bridges
        .iter()
        .filter(|bridge| !bridge.ports.is_empty())
        .collect();
    if pod_bridges.is_empty() {
        return vec![Found::NoPodBridges(bridges)];
    }
    if !netfilter.sysctls_visible {
        return vec![Found::SysctlsUnseen(pod_bridges)];
    }
    if !netfilter.sysctl_dir_present {
        return vec![Found::NotLoaded {
            pod_bridges,
            module_present: netfilter.module_present,
        }];
    }
    let ipv6_cluster_dns = node
        .kubelet
        .cluster_dns
        .as_ref()
        .is_some_and(|dns| dns.addresses.iter().any(|address| address.is_ipv6()));
    vec![
        sysctl(
            Sysctl {
                id: CALL_IPTABLES,
                file: &netfilter.call_iptables,
                when_off: Severity::Error,
                family: "IPv4",
            },
            &pod_bridges,
        ),
        sysctl(
            Sysctl {
                id: CALL_IP6TABLES,
                file: &netfilter.call_ip6tables,
                // Only an IPv6 cluster DNS is certain to be hit; otherwise IPv6 Services are.
                when_off: if ipv6_cluster_dns {
                    Severity::Error
                } else {
                    Severity::Warning
                },
                family: "IPv6",
            },
            &pod_bridges,
        ),
    ]
}

/// What `sysctl` holds, while pods sit on `pod_bridges`.
fn sysctl<'a>(sysctl: Sysctl<'a>, pod_bridges: &[&'a Bridge]) -> Found<'a> {
    let value = match &sysctl.file.content {
        Ok(text) => bridges::sysctl_value(text),
        Err(_) => None,
    };
    match value {
        // The kernel stores any non-zero value as 1.
        Some(0) => Found::SysctlOff {
            sysctl,
            pod_bridges: pod_bridges.to_vec(),
        },
        Some(_) => Found::SysctlOn(sysctl),
        None => Found::SysctlUnreadable {
            sysctl,
            pod_bridges: pod_bridges.to_vec(),
        },
    }
}

/// The check that says `found`: every message and fix of bridge netfilter is here.
fn describe(found: Found) -> Check {
    match found {
        Found::BridgesUnknown(why) => {
            let reason = match why {
                Unavailable::Missing => format!("{} is not under the root", bridges::CLASS_NET),
                Unavailable::Unreadable(reason) => {
                    format!("{} cannot be read: {reason}", bridges::CLASS_NET)
                }
            };
            Check::new(
                NETFILTER,
                Severity::Info,
                "bridges",
                format!("{reason}, so doctor cannot tell whether pods sit on a bridge; bridge netfilter not checked"),
            )
            .at(Location::file(bridges::CLASS_NET))
        }
        Found::NoPodBridges(bridges) => {
            let idle: Vec<&str> = bridges.iter().map(|bridge| bridge.name.as_str()).collect();
            let idle = if idle.is_empty() {
                String::new()
            } else {
                format!(" ({} without ports)", list(&idle))
            };
            Check::new(
                NETFILTER,
                Severity::Ok,
                "bridges",
                format!("no bridge has ports{idle}: pods are routed, not bridged, so bridge netfilter does not matter"),
            )
            .at(Location::file(bridges::CLASS_NET))
        }
        Found::SysctlsUnseen(pod_bridges) => Check::new(
            NETFILTER,
            Severity::Info,
            "bridges",
            format!(
                "{}, but {} is not under the root; bridge netfilter not checked",
                pods_on(&pod_bridges),
                bridges::PROC_SYS_NET
            ),
        )
        .at(Location::file(bridges::PROC_SYS_NET)),
        Found::NotLoaded {
            pod_bridges,
            module_present,
        } => {
            let module = if module_present {
                String::new()
            } else {
                format!(", nor {}", bridges::MODULE)
            };
            let on = pods_on(&pod_bridges);
            Check::new(
                MODULE_MISSING,
                Severity::Error,
                "br_netfilter",
                format!("br_netfilter is not loaded (no {}{module}) while {on}: replies from a CoreDNS pod on the same bridge skip the un-DNAT, and clients drop them as \"reply from unexpected source\"", bridges::SYSCTL_DIR),
            )
            .fix("`modprobe br_netfilter`, list it in /etc/modules-load.d/ (e.g. k8s.conf) so it loads at boot, and set net.bridge.bridge-nf-call-iptables = 1 in /etc/sysctl.d/")
            .at(Location::file(bridges::SYSCTL_DIR))
        }
        Found::SysctlOff {
            sysctl,
            pod_bridges,
        } => {
            let (name, family, on) = (sysctl.name(), sysctl.family, pods_on(&pod_bridges));
            Check::new(
                sysctl.id,
                sysctl.when_off,
                name.clone(),
                format!("{name} is 0 while {on}: {family} replies from a CoreDNS pod on the same bridge skip the un-DNAT, and clients drop them as \"reply from unexpected source\""),
            )
            .fix(format!("`sysctl -w {name}=1`, and set `{name} = 1` in /etc/sysctl.d/ so that it stays after a reboot or a module reload"))
            .at(sysctl.at())
        }
        Found::SysctlOn(sysctl) => {
            let (name, family) = (sysctl.name(), sysctl.family);
            Check::new(
                sysctl.id,
                Severity::Ok,
                name.clone(),
                format!("{name} is on: bridged {family} packets go through iptables"),
            )
            .at(sysctl.at())
        }
        Found::SysctlUnreadable {
            sysctl,
            pod_bridges,
        } => {
            let (name, on) = (sysctl.name(), pods_on(&pod_bridges));
            Check::new(
                sysctl.id,
                Severity::Info,
                name.clone(),
                format!("{name} cannot be read as a number while {on}; not checked"),
            )
            .at(sysctl.at())
        }
    }
}

/// "pods sit on bridge cni0 (3 ports)", for the messages.
fn pods_on(pod_bridges: &[&Bridge]) -> String {
    let on = pod_bridges
        .iter()
        .map(|bridge| {
            format!(
                "{} ({})",
                bridge.name,
                super::count(bridge.ports.len(), "port", "ports")
            )
        })
        .collect::<Vec<_>>();
    format!("pods sit on bridge {}", list(&on))
}

impl Sysctl<'_> {
    /// Its dotted name: `net.bridge.bridge-nf-call-iptables`.
    fn name(&self) -> String {
        self.file
            .file
            .asked
            .trim_start_matches("/proc/sys/")
            .replace('/', ".")
    }

    fn at(&self) -> Location {
        Location::line(&self.file.file.path, 1)
    }
}
