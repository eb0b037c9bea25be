//! Linux bridges and whether `br_netfilter` hands bridged packets to iptables: sysfs lists the
//! bridges (`/sys/class/net/<if>/bridge`) and their ports (`brif/`), `/proc/sys/net/bridge`
//! exists only while `br_netfilter` is loaded.
use super::root::{NodeRoot, ReadFile, Unavailable};

pub const CLASS_NET: &str = "/sys/class/net";
pub const MODULE: &str = "/sys/module/br_netfilter";
pub const PROC_SYS_NET: &str = "/proc/sys/net";
pub const SYSCTL_DIR: &str = "/proc/sys/net/bridge";
pub const CALL_IPTABLES: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";
pub const CALL_IP6TABLES: &str = "/proc/sys/net/bridge/bridge-nf-call-ip6tables";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bridge {
    pub name: String,
    /// Interfaces enslaved to it: pods' veths on a CNI bridge.
    pub ports: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct BridgeNetfilter {
    pub bridges: Result<Vec<Bridge>, Unavailable>,
    /// `/proc/sys/net` is there: sysctls can be read at all.
    pub sysctls_visible: bool,
    pub sysctl_dir_present: bool,
    pub module_present: bool,
    pub call_iptables: ReadFile<String>,
    pub call_ip6tables: ReadFile<String>,
}

pub fn read(root: &NodeRoot) -> BridgeNetfilter {
    BridgeNetfilter {
        bridges: bridges(root),
        sysctls_visible: root.exists(PROC_SYS_NET),
        sysctl_dir_present: root.exists(SYSCTL_DIR),
        module_present: root.exists(MODULE),
        call_iptables: root.read(CALL_IPTABLES),
        call_ip6tables: root.read(CALL_IP6TABLES),
    }
}

fn bridges(root: &NodeRoot) -> Result<Vec<Bridge>, Unavailable> {
    let mut bridges = Vec::new();
    for name in root.list(CLASS_NET)? {
        if !root.exists(&format!("{CLASS_NET}/{name}/bridge")) {
            continue;
        }
        // A bridge without a brif directory has no ports to list.
        let ports = root
            .list(&format!("{CLASS_NET}/{name}/brif"))
            .unwrap_or_default();
        bridges.push(Bridge { name, ports });
    }
    Ok(bridges)
}

/// A sysctl's value: the kernel writes one integer and a newline.
pub fn sysctl_value(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::symlink};

    use super::*;

    #[test]
    fn bridges_and_their_ports_as_sysfs_lays_them_out() {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("sys/devices/virtual/net");
        for device in [
            "cni0/bridge",
            "cni0/brif",
            "docker0/bridge",
            "veth1a2b/brport",
        ] {
            fs::create_dir_all(devices.join(device)).unwrap();
        }
        fs::create_dir_all(dir.path().join("sys/class/net")).unwrap();
        for device in ["cni0", "docker0", "veth1a2b"] {
            symlink(
                format!("../../devices/virtual/net/{device}"),
                dir.path().join("sys/class/net").join(device),
            )
            .unwrap();
        }
        symlink("../../veth1a2b/brport", devices.join("cni0/brif/veth1a2b")).unwrap();
        let read = read(&NodeRoot::new(dir.path().into()));
        assert_eq!(
            read.bridges.unwrap(),
            [
                Bridge {
                    name: "cni0".into(),
                    ports: vec!["veth1a2b".into()]
                },
                Bridge {
                    name: "docker0".into(),
                    ports: vec![]
                }
            ]
        );
        assert!(!read.sysctls_visible);
        assert_eq!(read.call_iptables.content, Err(Unavailable::Missing));
    }

    #[test]
    fn no_sys_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read(&NodeRoot::new(dir.path().into())).bridges,
            Err(Unavailable::Missing)
        );
    }

    #[test]
    fn sysctl_values() {
        assert_eq!(sysctl_value("1\n"), Some(1));
        assert_eq!(sysctl_value("0"), Some(0));
        assert_eq!(sysctl_value("on\n"), None);
        assert_eq!(sysctl_value(""), None);
    }
}
