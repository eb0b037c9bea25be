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
    let netfilter = &node.bridges;
    let bridges = match &netfilter.bridges {
        Ok(bridges) => bridges,
        Err(why) => {
            let reason = match why {
                Unavailable::Missing => format!("{} is not under the root", bridges::CLASS_NET),
                Unavailable::Unreadable(reason) => {
                    format!("{} cannot be read: {reason}", bridges::CLASS_NET)
                }
            };
            return vec![Check::new(
                NETFILTER,
                Severity::Info,
                "bridges",
                format!("{reason}, so doctor cannot tell whether pods sit on a bridge; bridge netfilter not checked"),
            )
            .at(Location::file(bridges::CLASS_NET))];
        }
    };
    let pod_bridges: Vec<&Bridge> = bridges
        .iter()
        .filter(|bridge| !bridge.ports.is_empty())
        .collect();
    if pod_bridges.is_empty() {
        let idle: Vec<&str> = bridges.iter().map(|bridge| bridge.name.as_str()).collect();
        let idle = if idle.is_empty() {
            String::new()
        } else {
            format!(" ({} without ports)", list(&idle))
        };
        return vec![Check::new(
            NETFILTER,
            Severity::Ok,
            "bridges",
            format!("no bridge has ports{idle}: pods are routed, not bridged, so bridge netfilter does not matter"),
        )
        .at(Location::file(bridges::CLASS_NET))];
    }
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
    let on = format!("pods sit on bridge {}", list(&on));
    if !netfilter.sysctls_visible {
        return vec![Check::new(
            NETFILTER,
            Severity::Info,
            "bridges",
            format!(
                "{on}, but {} is not under the root; bridge netfilter not checked",
                bridges::PROC_SYS_NET
            ),
        )
        .at(Location::file(bridges::PROC_SYS_NET))];
    }
    if !netfilter.sysctl_dir_present {
        let module = if netfilter.module_present {
            String::new()
        } else {
            format!(", nor {}", bridges::MODULE)
        };
        return vec![Check::new(
            MODULE_MISSING,
            Severity::Error,
            "br_netfilter",
            format!("br_netfilter is not loaded (no {}{module}) while {on}: replies from a CoreDNS pod on the same bridge skip the un-DNAT, and clients drop them as \"reply from unexpected source\"", bridges::SYSCTL_DIR),
        )
        .fix("`modprobe br_netfilter`, list it in /etc/modules-load.d/ (e.g. k8s.conf) so it loads at boot, and set net.bridge.bridge-nf-call-iptables = 1 in /etc/sysctl.d/")
        .at(Location::file(bridges::SYSCTL_DIR))];
    }
    let ipv6_cluster_dns = node
        .kubelet
        .cluster_dns
        .as_ref()
        .is_some_and(|dns| dns.addresses.iter().any(|address| address.is_ipv6()));
    vec![
        sysctl(
            CALL_IPTABLES,
            &netfilter.call_iptables,
            &on,
            Severity::Error,
            "IPv4",
        ),
        sysctl(
            CALL_IP6TABLES,
            &netfilter.call_ip6tables,
            &on,
            // Only an IPv6 cluster DNS is certain to be hit; otherwise IPv6 Services are.
            if ipv6_cluster_dns {
                Severity::Error
            } else {
                Severity::Warning
            },
            "IPv6",
        ),
    ]
}

fn sysctl(
    id: &'static str,
    file: &ReadFile<String>,
    on: &str,
    when_off: Severity,
    family: &str,
) -> Check {
    let name = file
        .file
        .asked
        .trim_start_matches("/proc/sys/")
        .replace('/', ".");
    let at = Location::line(&file.file.path, 1);
    let value = match &file.content {
        Ok(text) => bridges::sysctl_value(text),
        Err(_) => None,
    };
    match value {
        // The kernel stores any non-zero value as 1.
        Some(0) => Check::new(
            id,
            when_off,
            name.clone(),
            format!("{name} is 0 while {on}: {family} replies from a CoreDNS pod on the same bridge skip the un-DNAT, and clients drop them as \"reply from unexpected source\""),
        )
        .fix(format!("`sysctl -w {name}=1`, and set `{name} = 1` in /etc/sysctl.d/ so that it stays after a reboot or a module reload"))
        .at(at),
        Some(_) => Check::new(id, Severity::Ok, name.clone(), format!("{name} is on: bridged {family} packets go through iptables")).at(at),
        None => Check::new(
            id,
            Severity::Info,
            name.clone(),
            format!("{name} cannot be read as a number while {on}; not checked"),
        )
        .at(at),
    }
}
