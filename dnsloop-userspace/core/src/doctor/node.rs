//! A snapshot of one node's DNS configuration, read once from `--root` and the given
//! Corefiles: the checks only look at this.
use super::read::{
    bridges::{self, BridgeNetfilter},
    conntrack::{self, Conntrack},
    corefile::Corefile,
    kubelet::{self, Kubelet},
    resolv_conf::ResolvConf,
    root::{NodeRoot, ReadFile, Unavailable},
};

pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
/// Where systemd-resolved lists the upstream servers behind its 127.0.0.53 stub.
pub const SYSTEMD_RESOLV_CONF: &str = "/run/systemd/resolve/resolv.conf";

pub struct Node {
    /// The node's own resolver configuration.
    pub host_resolv: ReadFile<ResolvConf>,
    /// What kubelet hands to pods: [`PodResolv::File`] unless `resolvConf` is empty.
    pub pod_resolv: PodResolv,
    pub systemd_resolv: ReadFile<ResolvConf>,
    pub kubelet: Kubelet,
    pub corefiles: Vec<Corefile>,
    pub bridges: BridgeNetfilter,
    pub conntrack: Conntrack,
    /// `/run` holds nothing: a disk mounted from a node that is not running (or a root without
    /// its tmpfs), so runtime files are missing without anything being wrong.
    pub run_is_empty: bool,
}

pub enum PodResolv {
    File(ReadFile<ResolvConf>),
    /// `resolvConf: ""`: kubelet gives `dnsPolicy: Default` pods `nameserver 127.0.0.1`.
    Disabled,
}

impl PodResolv {
    pub fn file(&self) -> Option<&ReadFile<ResolvConf>> {
        match self {
            Self::File(file) => Some(file),
            Self::Disabled => None,
        }
    }
}

impl Node {
    pub fn read(root: &NodeRoot, corefiles: Vec<Corefile>) -> Self {
        let resolv = |path: &str| root.read(path).map(|text| Ok(ResolvConf::parse(&text)));
        let kubelet = kubelet::read(root);
        let pod_resolv = if kubelet.resolv_conf.value.is_empty() {
            PodResolv::Disabled
        } else {
            PodResolv::File(resolv(&kubelet.resolv_conf.value))
        };
        Self {
            host_resolv: resolv(HOST_RESOLV_CONF),
            pod_resolv,
            systemd_resolv: resolv(SYSTEMD_RESOLV_CONF),
            kubelet,
            corefiles,
            bridges: bridges::read(root),
            conntrack: conntrack::read(root),
            run_is_empty: root.list("/run").map_or(true, |names| names.is_empty()),
        }
    }

    /// Whether the file kubelet hands to pods is the node's /etc/resolv.conf (after symlinks).
    pub fn pods_get_host_resolv(&self) -> bool {
        self.pod_resolv
            .file()
            .is_some_and(|pod| pod.file.path == self.host_resolv.file.path)
    }

    /// Why a file is not there, in words, for a check's summary.
    pub fn why_unavailable(&self, file: &ReadFile<impl Sized>, why: &Unavailable) -> String {
        let shown = file.file.describe();
        match why {
            Unavailable::Missing if self.run_is_empty && file.file.path.starts_with("/run/") => {
                format!("{shown} is missing, and /run is empty under the root: runtime files exist only while the node runs")
            }
            Unavailable::Missing => format!("{shown} does not exist"),
            Unavailable::Unreadable(reason) => format!("{shown} cannot be read: {reason}"),
        }
    }
}
