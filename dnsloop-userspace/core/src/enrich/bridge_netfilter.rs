//! Whether packets crossing a Linux bridge go through iptables (and so through conntrack's
//! un-DNAT), as the `br_netfilter` sysctls of the reading thread's network namespace say.
use std::{
    io,
    net::IpAddr,
    path::{Path, PathBuf},
};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BridgeNetfilterError {
    #[error("reading {path} failed")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} holds {content:?}, not an integer")]
    Malformed { path: PathBuf, content: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgeNetfilter {
    /// Bridged packets go through iptables.
    Enabled,
    /// `br_netfilter` is active but the sysctl is 0: bridged packets skip iptables.
    Disabled,
    /// The sysctl does not exist: `br_netfilter` is not loaded (or not active in this
    /// namespace), so bridged packets skip iptables.
    NotLoaded,
}

/// The sysctl that decides for one address family whether bridged packets go through iptables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgeSysctl {
    CallIptables,
    CallIp6tables,
}

impl BridgeSysctl {
    /// The sysctl that governs packets to and from `address`.
    pub fn for_address(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self::CallIptables,
            IpAddr::V6(_) => Self::CallIp6tables,
        }
    }

    /// The name under `net.bridge.`, as people type it for `sysctl`.
    pub fn name(self) -> &'static str {
        match self {
            Self::CallIptables => "bridge-nf-call-iptables",
            Self::CallIp6tables => "bridge-nf-call-ip6tables",
        }
    }

    /// Reads the sysctl under `root` (`/` on a live system; a fixture tree in tests). Under
    /// `/proc/sys/net` the kernel shows the calling thread's network namespace.
    pub fn read(self, root: &Path) -> Result<BridgeNetfilter, BridgeNetfilterError> {
        let path = root.join("proc/sys/net/bridge").join(self.name());
        let content = match std::fs::read_to_string(&path) {
            Ok(content) => content,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok(BridgeNetfilter::NotLoaded)
            }
            Err(source) => return Err(BridgeNetfilterError::Read { path, source }),
        };
        // The kernel stores any non-zero value written here as 1, so only zero means off.
        match content.trim().parse::<i64>() {
            Ok(0) => Ok(BridgeNetfilter::Disabled),
            Ok(_) => Ok(BridgeNetfilter::Enabled),
            Err(_) => Err(BridgeNetfilterError::Malformed { path, content }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    /// A root whose `proc/sys/net/bridge` holds the given sysctl files.
    fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("create a temporary directory");
        let bridge = root.path().join("proc/sys/net/bridge");
        std::fs::create_dir_all(&bridge).expect("create the fixture tree");
        for (name, content) in files {
            std::fs::write(bridge.join(name), content).expect("write a fixture sysctl");
        }
        root
    }

    #[test]
    fn zero_means_disabled_and_nonzero_enabled() {
        let root = fixture(&[
            ("bridge-nf-call-iptables", "0\n"),
            ("bridge-nf-call-ip6tables", "1\n"),
        ]);
        assert_eq!(
            BridgeSysctl::CallIptables.read(root.path()).unwrap(),
            BridgeNetfilter::Disabled
        );
        assert_eq!(
            BridgeSysctl::CallIp6tables.read(root.path()).unwrap(),
            BridgeNetfilter::Enabled
        );
    }

    #[test]
    fn a_missing_sysctl_means_br_netfilter_is_not_loaded() {
        let without_files = fixture(&[]);
        assert_eq!(
            BridgeSysctl::CallIptables
                .read(without_files.path())
                .unwrap(),
            BridgeNetfilter::NotLoaded
        );
        let empty_root = tempfile::tempdir().expect("create a temporary directory");
        assert_eq!(
            BridgeSysctl::CallIp6tables.read(empty_root.path()).unwrap(),
            BridgeNetfilter::NotLoaded
        );
    }

    #[test]
    fn each_family_reads_its_own_sysctl() {
        let root = fixture(&[
            ("bridge-nf-call-iptables", "1\n"),
            ("bridge-nf-call-ip6tables", "0\n"),
        ]);
        let v4 = BridgeSysctl::for_address(IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2)));
        let v6 = BridgeSysctl::for_address(IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(v4.read(root.path()).unwrap(), BridgeNetfilter::Enabled);
        assert_eq!(v6.read(root.path()).unwrap(), BridgeNetfilter::Disabled);
    }

    #[test]
    fn garbage_is_an_error_not_a_guess() {
        let root = fixture(&[("bridge-nf-call-iptables", "on\n")]);
        let error = BridgeSysctl::CallIptables.read(root.path()).unwrap_err();
        assert!(
            matches!(error, BridgeNetfilterError::Malformed { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn an_unreadable_sysctl_is_an_error() {
        // A directory where the file should be: it exists, but reading it fails.
        let root = fixture(&[]);
        std::fs::create_dir(
            root.path()
                .join("proc/sys/net/bridge/bridge-nf-call-iptables"),
        )
        .expect("create the fixture directory");
        let error = BridgeSysctl::CallIptables.read(root.path()).unwrap_err();
        assert!(
            matches!(error, BridgeNetfilterError::Read { .. }),
            "{error:?}"
        );
    }
}
