//! The node's DNS configuration as a bundle records it.
use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::{
    doctor,
    schema::{DoctorRecord, NodeDnsConfig, ResolvConf},
    sink::OutputFormat,
};

/// The sysctls that decide how DNS crosses a node, recorded as they were.
const SYSCTLS: [&str; 6] = [
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_count",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_udp_timeout",
    "net/ipv4/ip_forward",
];

/// The node's DNS configuration at capture time.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub kernel: Option<String>,
    pub hostname: Option<String>,
    pub resolv_conf: Option<String>,
    pub resolv_conf_target: Option<PathBuf>,
    pub sysctls: Vec<(&'static str, Option<String>)>,
    /// `dnsloop doctor`'s checks of this node, as its JSON lines and as text.
    pub checks_json: Vec<DoctorRecord>,
    pub checks_text: String,
}

impl NodeConfig {
    /// Reads the node whose root is at `root`. The kernel's view (`/proc/sys`) is this
    /// process's: a capture shares the node's network namespace, whatever its root.
    pub fn read(root: &Path) -> Self {
        let read = |path: &str| fs::read_to_string(path).ok();
        let trimmed = |path: &str| read(path).map(|text| text.trim().to_string());
        let resolv_conf = root.join("etc/resolv.conf");
        let doctor_output = |output| {
            let config = doctor::Config {
                root: root.to_path_buf(),
                corefiles: Vec::new(),
                output,
            };
            let mut out = Vec::new();
            match doctor::doctor(&config, &mut out) {
                Ok(_) => String::from_utf8_lossy(&out).into_owned(),
                Err(error) => format!("doctor could not run: {error}\n"),
            }
        };
        Self {
            kernel: trimmed("/proc/sys/kernel/osrelease"),
            hostname: trimmed("/proc/sys/kernel/hostname"),
            resolv_conf: fs::read_to_string(&resolv_conf).ok(),
            resolv_conf_target: fs::read_link(&resolv_conf).ok(),
            sysctls: SYSCTLS
                .iter()
                .map(|name| (*name, trimmed(&format!("/proc/sys/{name}"))))
                .collect(),
            checks_json: doctor_output(OutputFormat::Json)
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect(),
            checks_text: doctor_output(OutputFormat::Text),
        }
    }

    pub fn json(&self) -> NodeDnsConfig {
        NodeDnsConfig {
            resolv_conf: ResolvConf {
                path: "/etc/resolv.conf".to_owned(),
                symlink_to: self
                    .resolv_conf_target
                    .as_ref()
                    .map(|target| target.display().to_string()),
                content: self.resolv_conf.clone(),
            },
            sysctls: self
                .sysctls
                .iter()
                .map(|(name, value)| (name.replace('/', "."), value.clone()))
                .collect(),
            checks: self.checks_json.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_read_below_the_root_given() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("etc")).unwrap();
        fs::write(
            root.path().join("etc/resolv.conf"),
            "nameserver 169.254.25.10\n",
        )
        .unwrap();
        let node = NodeConfig::read(root.path());
        assert_eq!(
            node.resolv_conf.as_deref(),
            Some("nameserver 169.254.25.10\n")
        );
        // doctor read the same root: it flags the node-local cache as the node's upstream.
        assert!(
            node.checks_text.contains("169.254.25.10"),
            "{}",
            node.checks_text
        );
    }
}
