//! Finding the namespaces behind the node's veths (the pods), so that their loopback can be
//! watched and they can be named after their pod (`kube-system/coredns-5d78c9869d-abcde`, see
//! [`crate::node::pods`]), or by address when that is not known, rather than by veth.
//!
//! A pod's namespace is found without the API server: among the namespaces the node knows
//! (`/var/run/netns/*` and `/proc/<pid>/ns/net`), the one holding the other end of a veth is the
//! one whose veth names ours as its peer, and ours names it.
use std::{
    collections::HashSet,
    fs::File,
    io,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::MetadataExt,
    },
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use thiserror::Error;

use crate::{
    node::pods::{PodName, PodNames},
    node::topology::{self, Link, LinkRole},
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
    /// `pod kube-system/coredns-5d78c9869d-abcde` when its pod is known; else `pod 10.244.0.3`
    /// (its first address; `netns ...` when its veth is not on a bridge), or the namespace's
    /// file name when it has none.
    pub label: String,
    pub cookie: u64,
    /// The namespace's inode number, by which [`PodNames`] knows it.
    pub inode: u64,
    pub pod: Option<PodName>,
    /// Every address the namespace holds, with the link holding it: a query to one of them
    /// entering the pod can be delivered there.
    pub addresses: Vec<(u32, std::net::IpAddr)>,
}

impl PodNamespace {
    fn name_after(&mut self, pod: PodName) {
        self.label = pod_label(&pod);
        self.pod = Some(pod);
    }
}

fn pod_label(pod: &PodName) -> String {
    format!("pod {pod}")
}

/// How long a namespace found without its pod's name may still turn out to be a pod's.
const NAMING_PATIENCE: Duration = Duration::from_secs(120);

/// Pod namespaces found before their pod could be named. A container runtime sets up a pod's
/// network (the veth dnsloop sees appear) before it starts the pod's sandbox process, whose
/// cgroup names the pod: such a pod is named by address at first, and after its pod once
/// [`AwaitingNames::named`] finds it. A namespace still unnamed after [`NAMING_PATIENCE`] is no
/// pod's, or its pod cannot be named here, and is no longer asked about.
#[derive(Default)]
pub struct AwaitingNames {
    pods: Vec<(PodNamespace, Instant)>,
}

impl AwaitingNames {
    /// Remembers `pod`, found at `now`, if it is not named; a namespace found again behind the
    /// same veth replaces the one found before (and keeps its time).
    pub fn add(&mut self, pod: &PodNamespace, now: Instant) {
        let since = self
            .pods
            .iter()
            .find(|(known, _)| known.node_veth == pod.node_veth)
            .map_or(now, |(_, since)| *since);
        self.forget(pod.node_veth);
        if pod.pod.is_none() {
            self.pods.push((pod.clone(), since));
        }
    }

    /// Forgets the namespace behind the node's veth `node_veth` (it went away).
    pub fn forget(&mut self, node_veth: u32) {
        self.pods.retain(|(known, _)| known.node_veth != node_veth);
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The namespaces `pod_names` now names, named; those past their patience are forgotten.
    pub fn named(&mut self, pod_names: &PodNames, now: Instant) -> Vec<PodNamespace> {
        self.pods
            .retain(|(_, since)| now.saturating_duration_since(*since) < NAMING_PATIENCE);
        if self.pods.is_empty() {
            return Vec::new();
        }
        let inodes = self.pods.iter().map(|(pod, _)| pod.inode).collect();
        let mut names = pod_names.of_namespaces(&inodes);
        let mut named = Vec::new();
        self.pods.retain(|(pod, _)| match names.remove(&pod.inode) {
            Some(name) => {
                let mut pod = pod.clone();
                pod.name_after(name);
                named.push(pod);
                false
            }
            None => true,
        });
        named
    }
}

/// The namespaces at the other end of the veths among `node_links`.
///
/// Interface numbers repeat across namespaces (labs, or kind nodes, built alike on one host), so
/// a candidate must first be the namespace a veth's `peer_netns_id` names: the kernel says
/// which id this namespace knows each candidate by. Only those are entered. `pod_names` names
/// them after their pods.
pub fn discover(node_links: &[Link], pod_names: &PodNames) -> Vec<PodNamespace> {
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
                    Ok(runtime) => runtime.block_on(pods_behind(&veths, pod_names)),
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

/// A namespace at the other end of some of the node's veths.
struct Behind<'a> {
    path: PathBuf,
    /// The namespace's inode number, by which [`PodNames`] knows it.
    inode: u64,
    veths: Vec<&'a Veth>,
    inspection: Inspection,
}

async fn pods_behind(veths: &[Veth], pod_names: &PodNames) -> Vec<PodNamespace> {
    let mut netns_ids = match topology::NetnsIds::open() {
        Ok(netns_ids) => netns_ids,
        Err(error) => {
            tracing::warn!("not looking for pod namespaces: {error}");
            return Vec::new();
        }
    };
    let mut behind = Vec::new();
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
        let Ok(meta) = file.metadata() else {
            continue;
        };
        match inspect(&path) {
            Ok(inspection) => behind.push(Behind {
                path,
                inode: meta.ino(),
                veths: leading_here,
                inspection,
            }),
            Err(error) => tracing::debug!("skipping {}: {error}", path.display()),
        }
    }
    let pods = pod_names.of_namespaces(&behind.iter().map(|found| found.inode).collect());
    behind
        .iter()
        .flat_map(|found| {
            found.inspection.pods_of(
                &found.veths,
                &found.path,
                found.inode,
                pods.get(&found.inode),
            )
        })
        .collect()
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

/// `SO_NETNS_COOKIE` (Linux 5.14+): the same cookie `bpf_get_netns_cookie` returns in the kernel.
const SO_NETNS_COOKIE: libc::c_int = 71;

/// What names the calling thread's network namespace: its cookie (`SO_NETNS_COOKIE`, Linux
/// 5.14+), the one `bpf_get_netns_cookie` returns in the kernel; on older kernels its inode
/// number (`/proc/thread-self/ns/net`), as unique among the namespaces that exist. A kernel
/// gives either every namespace a cookie or none, so one run never mixes the two.
pub fn current_cookie() -> io::Result<u64> {
    match socket_netns_cookie() {
        Err(error) if no_cookies(&error) => namespace_inode(),
        result => result,
    }
}

/// Whether this kernel gives network namespaces cookies (`SO_NETNS_COOKIE`, Linux 5.14).
pub fn cookies_exist() -> bool {
    !socket_netns_cookie().is_err_and(|error| no_cookies(&error))
}

/// `SO_NETNS_COOKIE` failing with `error` means the kernel has no namespace cookies: before
/// 5.14 it knows no such option.
fn no_cookies(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ENOPROTOOPT)
}

/// The inode number of the calling thread's network namespace.
fn namespace_inode() -> io::Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// The cookie of the calling thread's network namespace, from `SO_NETNS_COOKIE`.
fn socket_netns_cookie() -> io::Result<u64> {
    // SAFETY: plain socket/getsockopt/close calls on a descriptor we own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        );
        let result = if rc == 0 {
            Ok(cookie)
        } else {
            Err(io::Error::last_os_error())
        };
        libc::close(fd);
        result
    }
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
    /// Every address the namespace holds, with the link holding it.
    held: Vec<(u32, std::net::IpAddr)>,
}

impl Inspection {
    /// The pod namespaces of `node_veths` this one (at `path`, with `inode`) is, named after
    /// `pod` when it is known.
    fn pods_of(
        &self,
        node_veths: &[&Veth],
        path: &Path,
        inode: u64,
        pod: Option<&PodName>,
    ) -> Vec<PodNamespace> {
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
                let on_link = self
                    .held
                    .iter()
                    .filter(|(index, _)| *index == link.index)
                    .map(|&(_, address)| address);
                let address = topology::naming_order(on_link).first().copied();
                let label = match (pod, address) {
                    // Whatever the CNI's veths look like (Calico's are not bridged), it is a pod.
                    (Some(pod), _) => pod_label(pod),
                    (None, Some(address)) => format!("{kind} {address}"),
                    (None, None) => path
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_else(|| path.display().to_string()),
                };
                Some(PodNamespace {
                    node_veth: node_veth.index,
                    path: path.into(),
                    label,
                    cookie: self.cookie,
                    inode,
                    pod: pod.cloned(),
                    addresses: self.held.clone(),
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
                Ok(Inspection {
                    links: topology::list_links().await?,
                    cookie: current_cookie()?,
                    held: topology::held_addresses(None).await?,
                })
            })
        },
    )?
    .map_err(inspect_error)
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::symlink};

    use super::*;

    const NETNS: u64 = 4026532301;
    const UID: &str = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d";

    /// A node's `/proc` and `/var/log/pods`, where the client pod's sandbox has not started.
    struct Node {
        dir: tempfile::TempDir,
    }

    impl Node {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("create a temporary directory");
            fs::create_dir_all(dir.path().join("proc")).unwrap();
            fs::create_dir_all(dir.path().join(format!("pods/default_client_{UID}"))).unwrap();
            Self { dir }
        }

        fn start_sandbox(&self) {
            let process = self.dir.path().join("proc/4242");
            fs::create_dir_all(process.join("ns")).unwrap();
            symlink(format!("net:[{NETNS}]"), process.join("ns/net")).unwrap();
            fs::write(
                process.join("cgroup"),
                format!(
                    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice\n",
                    UID.replace('-', "_")
                ),
            )
            .unwrap();
        }

        fn pod_names(&self) -> PodNames {
            PodNames::below(
                &self.dir.path().join("proc"),
                self.dir.path().join("pods"),
                None,
            )
        }
    }

    fn found_by_address() -> PodNamespace {
        PodNamespace {
            node_veth: 7,
            path: "/run/netns/cni-1234".into(),
            label: "pod 10.244.0.2".into(),
            cookie: 42,
            inode: NETNS,
            pod: None,
            addresses: Vec::new(),
        }
    }

    #[test]
    fn a_pod_found_before_its_sandbox_is_named_once_the_sandbox_runs() {
        let node = Node::new();
        let pod_names = node.pod_names();
        let found = Instant::now();
        let mut awaiting = AwaitingNames::default();
        awaiting.add(&found_by_address(), found);

        assert!(awaiting.named(&pod_names, found).is_empty());
        assert!(!awaiting.is_empty(), "still to be named");

        node.start_sandbox();
        let named = awaiting.named(&pod_names, found + Duration::from_secs(1));
        assert_eq!(
            named
                .iter()
                .map(|pod| (pod.node_veth, pod.label.as_str()))
                .collect::<Vec<_>>(),
            [(7, "pod default/client")]
        );
        assert!(awaiting.is_empty(), "named once");
    }

    #[test]
    fn before_netns_cookies_a_namespace_is_named_by_its_inode() {
        // What every kernel gives, and what `ip netns identify` compares.
        let inode = std::fs::metadata("/proc/self/ns/net")
            .expect("this process's namespace")
            .ino();
        assert_eq!(namespace_inode().expect("the thread's namespace"), inode);
    }

    #[test]
    fn a_namespace_no_pod_claims_is_given_up() {
        let node = Node::new();
        let found = Instant::now();
        let mut awaiting = AwaitingNames::default();
        awaiting.add(&found_by_address(), found);
        assert!(awaiting
            .named(&node.pod_names(), found + NAMING_PATIENCE)
            .is_empty());
        assert!(awaiting.is_empty());
    }

    #[test]
    fn only_unnamed_namespaces_still_present_are_awaited() {
        let found = Instant::now();
        let mut awaiting = AwaitingNames::default();
        let mut named = found_by_address();
        named.name_after(PodName {
            namespace: "default".into(),
            name: "client".into(),
            uid: UID.into(),
        });
        awaiting.add(&named, found);
        assert!(awaiting.is_empty(), "a named pod awaits nothing");

        // Found again behind the same veth (a CNI moving it onto the bridge): once, and named.
        awaiting.add(&found_by_address(), found);
        awaiting.add(&found_by_address(), found + Duration::from_secs(1));
        assert_eq!(awaiting.pods.len(), 1);
        assert_eq!(
            awaiting.pods[0].1, found,
            "patience runs from the first finding"
        );
        awaiting.add(&named, found);
        assert!(awaiting.is_empty());

        awaiting.add(&found_by_address(), found);
        awaiting.forget(7);
        assert!(awaiting.is_empty(), "its veth went away");
    }
}
