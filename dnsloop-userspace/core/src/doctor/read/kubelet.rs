//! kubelet's DNS settings: `resolvConf`, `clusterDNS` and `clusterDomain` from its config file
//! (kubeadm's `/var/lib/kubelet/config.yaml`, or kubespray's
//! `/etc/kubernetes/kubelet-config.yaml`), overridden by the flags kubeadm keeps in
//! `/var/lib/kubelet/kubeadm-flags.env` (older kubeadm put `--resolv-conf` there).
use std::net::IpAddr;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::root::{NodeRoot, Unavailable};
use crate::doctor::{address, check::Location};

pub const CONFIG_FILES: [&str; 2] = [
    "/var/lib/kubelet/config.yaml",
    "/etc/kubernetes/kubelet-config.yaml",
];
pub const KUBEADM_FLAGS: &str = "/var/lib/kubelet/kubeadm-flags.env";
/// KubeletConfiguration's default `resolvConf`.
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// KubeletConfiguration has no default `clusterDomain`; every installer sets this one.
pub const USUAL_CLUSTER_DOMAIN: &str = "cluster.local";

#[derive(Clone, Debug)]
pub struct Kubelet {
    pub config: ConfigFile,
    /// The file kubelet hands to pods with `dnsPolicy: Default` (and whose search list it
    /// appends to every pod's).
    pub resolv_conf: Setting<String>,
    pub cluster_dns: Option<ClusterDns>,
    pub cluster_domain: Setting<String>,
}

#[derive(Clone, Debug)]
pub enum ConfigFile {
    /// None of [`CONFIG_FILES`] exists.
    NotFound,
    Unusable {
        file: String,
        reason: String,
    },
    Found {
        file: String,
    },
}

/// A setting's value and where it came from: a file's line, or kubelet's default (None).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting<T> {
    pub value: T,
    pub origin: Option<Location>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDns {
    pub addresses: Vec<IpAddr>,
    /// Entries that are not addresses (kubelet refuses them).
    pub invalid: Vec<String>,
    pub origin: Location,
}

impl Kubelet {
    /// Whether doctor found any of kubelet's settings, so that its defaults are kubelet's
    /// and not a guess about a machine that may not run kubelet at all.
    pub fn is_configured(&self) -> bool {
        matches!(self.config, ConfigFile::Found { .. })
            || self.resolv_conf.origin.is_some()
            || self.cluster_dns.is_some()
    }

    /// Where kubelet's settings are, for a fix to name.
    pub fn config_file(&self) -> &str {
        match &self.config {
            ConfigFile::Found { file } | ConfigFile::Unusable { file, .. } => file,
            ConfigFile::NotFound => CONFIG_FILES[0],
        }
    }
}

/// The parts of a KubeletConfiguration that are about DNS.
#[derive(Deserialize)]
struct KubeletConfiguration {
    #[serde(rename = "resolvConf")]
    resolv_conf: Option<Spanned<String>>,
    #[serde(rename = "clusterDNS")]
    cluster_dns: Option<Vec<Spanned<String>>>,
    #[serde(rename = "clusterDomain")]
    cluster_domain: Option<Spanned<String>>,
}

pub fn read(root: &NodeRoot) -> Kubelet {
    let mut kubelet = Kubelet {
        config: ConfigFile::NotFound,
        resolv_conf: Setting {
            value: DEFAULT_RESOLV_CONF.to_string(),
            origin: None,
        },
        cluster_dns: None,
        cluster_domain: Setting {
            value: USUAL_CLUSTER_DOMAIN.to_string(),
            origin: None,
        },
    };
    for path in CONFIG_FILES {
        let read = root.read(path);
        let file = read.file.path.clone();
        let text = match read.content {
            Err(Unavailable::Missing) => continue,
            Err(Unavailable::Unreadable(reason)) => {
                kubelet.config = ConfigFile::Unusable { file, reason };
                break;
            }
            Ok(text) => text,
        };
        match serde_saphyr::from_str::<KubeletConfiguration>(&text) {
            Ok(config) => {
                apply_config(&mut kubelet, &file, config);
                kubelet.config = ConfigFile::Found { file };
            }
            Err(error) => {
                // The parser's message can quote the file over several lines; its first says
                // where and what.
                let reason = error
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                kubelet.config = ConfigFile::Unusable { file, reason };
            }
        }
        break;
    }
    let flags = root.read(KUBEADM_FLAGS);
    if let Ok(text) = &flags.content {
        apply_flags(&mut kubelet, &flags.file.path, text);
    }
    kubelet
}

fn apply_config(kubelet: &mut Kubelet, file: &str, config: KubeletConfiguration) {
    let at = |spanned_line: u64| Location::line(file, u32::try_from(spanned_line).unwrap_or(0));
    if let Some(resolv_conf) = config.resolv_conf {
        kubelet.resolv_conf = Setting {
            origin: Some(at(resolv_conf.referenced.line())),
            value: resolv_conf.value,
        };
    }
    if let Some(entries) = config.cluster_dns {
        let line = entries.first().map_or(0, |entry| entry.referenced.line());
        kubelet.cluster_dns = Some(cluster_dns(
            entries.into_iter().map(|entry| entry.value),
            at(line),
        ));
    }
    if let Some(domain) = config.cluster_domain {
        kubelet.cluster_domain = Setting {
            origin: Some(at(domain.referenced.line())),
            value: domain.value,
        };
    }
}

/// `--resolv-conf`, `--cluster-dns` and `--cluster-domain`, as `--flag=value` or
/// `--flag value`, anywhere in an env file's values.
fn apply_flags(kubelet: &mut Kubelet, file: &str, text: &str) {
    for (index, line) in text.lines().enumerate() {
        let at = Location::line(file, u32::try_from(index + 1).unwrap_or(u32::MAX));
        let values = line.split_once('=').map_or(line, |(_, values)| values);
        let mut words = values
            .split_whitespace()
            .map(|word| word.trim_matches(|c| c == '"' || c == '\''));
        while let Some(word) = words.next() {
            let Some(flag) = word.strip_prefix("--") else {
                continue;
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (flag, None),
            };
            if !matches!(name, "resolv-conf" | "cluster-dns" | "cluster-domain") {
                continue;
            }
            let Some(value) = value.or_else(|| words.next().map(String::from)) else {
                continue;
            };
            match name {
                "resolv-conf" => {
                    kubelet.resolv_conf = Setting {
                        value,
                        origin: Some(at.clone()),
                    }
                }
                "cluster-dns" => {
                    kubelet.cluster_dns =
                        Some(cluster_dns(value.split(',').map(String::from), at.clone()))
                }
                _ => {
                    kubelet.cluster_domain = Setting {
                        value,
                        origin: Some(at.clone()),
                    }
                }
            }
        }
    }
}

fn cluster_dns(entries: impl Iterator<Item = String>, origin: Location) -> ClusterDns {
    let mut addresses = Vec::new();
    let mut invalid = Vec::new();
    for entry in entries {
        match address::parse(entry.trim()) {
            Some(address) => addresses.push(address),
            None => invalid.push(entry),
        }
    }
    ClusterDns {
        addresses,
        invalid,
        origin,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn node(files: &[(&str, &str)]) -> (tempfile::TempDir, NodeRoot) {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        for (path, content) in files {
            let host = dir.path().join(path.trim_start_matches('/'));
            fs::create_dir_all(host.parent().unwrap()).unwrap();
            fs::write(host, content).unwrap();
        }
        let root = NodeRoot::new(dir.path().into());
        (dir, root)
    }

    const KUBEADM_CONFIG: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
- fd00:10:96::a
clusterDomain: cluster.local
kind: KubeletConfiguration
resolvConf: /run/systemd/resolve/resolv.conf
";

    #[test]
    fn reads_kubeadms_config_with_lines() {
        let (_dir, root) = node(&[("/var/lib/kubelet/config.yaml", KUBEADM_CONFIG)]);
        let kubelet = read(&root);
        assert!(kubelet.is_configured());
        assert_eq!(
            kubelet.resolv_conf.value,
            "/run/systemd/resolve/resolv.conf"
        );
        assert_eq!(
            kubelet.resolv_conf.origin,
            Some(Location::line("/var/lib/kubelet/config.yaml", 11))
        );
        let cluster_dns = kubelet.cluster_dns.unwrap();
        assert_eq!(cluster_dns.addresses.len(), 2);
        assert_eq!(cluster_dns.origin.line, Some(7));
        assert_eq!(kubelet.cluster_domain.origin.unwrap().line, Some(9));
    }

    #[test]
    fn kubesprays_config_is_found_where_kubespray_puts_it() {
        let (_dir, root) = node(&[(
            "/etc/kubernetes/kubelet-config.yaml",
            "kind: KubeletConfiguration\nclusterDNS:\n  - 169.254.25.10\nresolvConf: \"/etc/resolv.conf\"\n",
        )]);
        let kubelet = read(&root);
        assert!(
            matches!(kubelet.config, ConfigFile::Found { ref file } if file == "/etc/kubernetes/kubelet-config.yaml")
        );
        assert_eq!(
            kubelet.cluster_dns.unwrap().addresses,
            ["169.254.25.10".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn defaults_apply_when_nothing_is_set_or_nothing_is_found() {
        let (_dir, root) = node(&[(
            "/var/lib/kubelet/config.yaml",
            "kind: KubeletConfiguration\n",
        )]);
        let kubelet = read(&root);
        assert!(kubelet.is_configured());
        assert_eq!(kubelet.resolv_conf.value, DEFAULT_RESOLV_CONF);
        assert_eq!(kubelet.resolv_conf.origin, None);
        assert!(kubelet.cluster_dns.is_none());

        let (_dir, root) = node(&[]);
        let kubelet = read(&root);
        assert!(matches!(kubelet.config, ConfigFile::NotFound));
        assert!(!kubelet.is_configured());
    }

    #[test]
    fn kubeadm_flags_override_the_config_file() {
        let (_dir, root) = node(&[
            ("/var/lib/kubelet/config.yaml", KUBEADM_CONFIG),
            (
                KUBEADM_FLAGS,
                "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --resolv-conf /etc/kubernetes/resolv.conf --cluster-dns=10.233.0.3,bogus\"\n",
            ),
        ]);
        let kubelet = read(&root);
        assert_eq!(kubelet.resolv_conf.value, "/etc/kubernetes/resolv.conf");
        assert_eq!(
            kubelet.resolv_conf.origin,
            Some(Location::line(KUBEADM_FLAGS, 1))
        );
        let cluster_dns = kubelet.cluster_dns.unwrap();
        assert_eq!(cluster_dns.addresses.len(), 1);
        assert_eq!(cluster_dns.invalid, ["bogus"]);
    }

    #[test]
    fn an_empty_resolv_conf_is_kept_empty() {
        let (_dir, root) = node(&[("/var/lib/kubelet/config.yaml", "resolvConf: \"\"\n")]);
        assert_eq!(read(&root).resolv_conf.value, "");
    }

    #[test]
    fn broken_yaml_is_unusable_not_a_crash() {
        for junk in [
            "clusterDNS: 10.96.0.10\n",
            "resolvConf: [\n",
            "\u{0}\u{1}",
            "- a\n- b\n",
            "resolvConf: &a [*a]\n",
        ] {
            let (_dir, root) = node(&[("/var/lib/kubelet/config.yaml", junk)]);
            let kubelet = read(&root);
            assert!(
                matches!(kubelet.config, ConfigFile::Unusable { .. }),
                "{junk:?}: {:?}",
                kubelet.config
            );
            assert_eq!(kubelet.resolv_conf.value, DEFAULT_RESOLV_CONF);
        }
    }
}
