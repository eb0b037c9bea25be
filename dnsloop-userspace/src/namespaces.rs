//! Finding the namespaces behind the node's veths (the pods), so that their loopback can be
//! watched and they can be named by address rather than by veth.
//!
//! A pod's namespace is found without the API server: among the namespaces the node knows
//! (`/var/run/netns/*` and `/proc/<pid>/ns/net`), the one holding the other end of a veth is the
//! one whose veth names ours as its peer, and ours names it.
use std::{
    collections::HashSet,
    fs::File,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::MetadataExt,
    },
    path::{Path, PathBuf},
};

use thiserror::Error;

use crate::{
    netns,
    topology::{self, Link, LinkRole},
};

#[derive(Debug, Error)]
pub enum NamespaceError {
    #[error("entering network namespace {path} failed (dnsloop needs CAP_SYS_ADMIN for that)")]
    Enter {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("inspecting network namespace {path} failed")]
    Inspect {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A namespace at the other end of one of the node's veths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNamespace {
    /// The node end of the veth.
    pub node_veth: u32,
    pub path: PathBuf,
    /// `pod 10.244.0.3` (its first address; `netns ...` when its veth is not on a bridge), or
    /// the namespace's file name when it has none.
    pub label: String,
    pub cookie: u64,
}

/// The namespaces at the other end of the veths among `node_links`.
///
/// Interface numbers repeat across namespaces (labs, or kind nodes, built alike on one host), so
/// a candidate must first be the namespace a veth's `peer_netns_id` names: the kernel says
/// which id this namespace knows each candidate by. Only those are entered.
pub fn discover(node_links: &[Link]) -> Vec<PodNamespace> {
    let veths: Vec<Veth> = node_links
        .iter()
        .filter_map(|link| match link.role {
            LinkRole::Veth {
                peer_netns_id,
                peer_index,
                bridged,
            } => Some(Veth {
                index: link.index,
                peer_netns_id,
                peer_index,
                bridged,
            }),
            _ => None,
        })
        .collect();
    if veths.is_empty() {
        return Vec::new();
    }
    // Netlink is asked from a thread of our own with its own runtime: the caller may be inside
    // one already. The thread stays in the caller's namespace.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(pods_behind(&veths)),
                    Err(error) => {
                        tracing::warn!("not looking for pod namespaces: {error}");
                        Vec::new()
                    }
                }
            })
            .join()
            .unwrap_or_default()
    })
}

/// The node end of a veth, and where its other end is.
struct Veth {
    index: u32,
    peer_netns_id: i32,
    peer_index: u32,
    /// On a bridge, as pods' veths are (a veth straight to the node leads elsewhere, e.g. to
    /// another host's namespace).
    bridged: bool,
}

async fn pods_behind(veths: &[Veth]) -> Vec<PodNamespace> {
    let mut netns_ids = match topology::NetnsIds::open() {
        Ok(netns_ids) => netns_ids,
        Err(error) => {
            tracing::warn!("not looking for pod namespaces: {error}");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for path in candidate_namespaces() {
        // A process may exit, or a namespace vanish, while we look: skip it.
        let Ok(file) = File::open(&path) else {
            continue;
        };
        let netns_id = match netns_ids.of(file.as_fd()).await {
            Ok(Some(id)) => id,
            Ok(None) => continue,
            Err(error) => {
                tracing::debug!("skipping {}: {error}", path.display());
                continue;
            }
        };
        let leading_here: Vec<&Veth> = veths
            .iter()
            .filter(|veth| veth.peer_netns_id == netns_id)
            .collect();
        if leading_here.is_empty() {
            continue;
        }
        match inspect(&path) {
            Ok(inspection) => found.extend(inspection.pods_of(&leading_here, &path)),
            Err(error) => tracing::debug!("skipping {}: {error}", path.display()),
        }
    }
    found
}

/// Runs `work` on a thread that has entered the network namespace at `path`.
pub fn in_namespace<T: Send>(
    path: &Path,
    work: impl FnOnce() -> T + Send,
) -> Result<T, NamespaceError> {
    let file = File::open(path).map_err(|source| NamespaceError::Enter {
        path: path.into(),
        source,
    })?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns on a namespace file we hold open; it affects only this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(NamespaceError::Enter {
                        path: path.into(),
                        source: std::io::Error::last_os_error(),
                    });
                }
                Ok(work())
            })
            .join()
            .unwrap_or_else(|_| {
                Err(NamespaceError::Inspect {
                    path: path.into(),
                    source: "the inspecting thread panicked".into(),
                })
            })
    })
}

/// Every distinct network namespace file, except our own.
fn candidate_namespaces() -> Vec<PathBuf> {
    let own = std::fs::metadata("/proc/thread-self/ns/net")
        .map(|meta| meta.ino())
        .ok();
    let mut seen: HashSet<u64> = own.into_iter().collect();
    let named = std::fs::read_dir("/var/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path());
    let of_processes = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|entry| entry.path().join("ns/net"));
    named
        .chain(of_processes)
        .filter(|path| std::fs::metadata(path).is_ok_and(|meta| seen.insert(meta.ino())))
        .collect()
}

struct Inspection {
    links: Vec<Link>,
    cookie: u64,
    /// The first address of each of the namespace's veths, by index.
    addresses: Vec<(u32, Option<std::net::IpAddr>)>,
}

impl Inspection {
    fn pods_of(&self, node_veths: &[&Veth], path: &Path) -> Vec<PodNamespace> {
        self.links
            .iter()
            .filter_map(|link| {
                let LinkRole::Veth { peer_index, .. } = link.role else {
                    return None;
                };
                let node_veth = node_veths
                    .iter()
                    .find(|veth| veth.index == peer_index && veth.peer_index == link.index)?;
                let kind = if node_veth.bridged { "pod" } else { "netns" };
                let address = self
                    .addresses
                    .iter()
                    .find(|(index, _)| *index == link.index)
                    .and_then(|(_, address)| *address);
                let label = match address {
                    Some(address) => format!("{kind} {address}"),
                    None => path
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_else(|| path.display().to_string()),
                };
                Some(PodNamespace {
                    node_veth: node_veth.index,
                    path: path.into(),
                    label,
                    cookie: self.cookie,
                })
            })
            .collect()
    }
}

fn inspect(path: &Path) -> Result<Inspection, NamespaceError> {
    let inspect_error =
        |source: Box<dyn std::error::Error + Send + Sync>| NamespaceError::Inspect {
            path: path.into(),
            source,
        };
    in_namespace(
        path,
        || -> Result<Inspection, Box<dyn std::error::Error + Send + Sync>> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let links = topology::list_links().await?;
                let mut addresses = Vec::new();
                for link in &links {
                    if matches!(link.role, LinkRole::Veth { .. }) {
                        let first = topology::addresses(Some(link.index))
                            .await?
                            .into_iter()
                            .next();
                        addresses.push((link.index, first));
                    }
                }
                Ok(Inspection {
                    links,
                    cookie: netns::current_cookie()?,
                    addresses,
                })
            })
        },
    )?
    .map_err(inspect_error)
}
