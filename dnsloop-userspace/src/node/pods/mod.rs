//! Which pod a network namespace belongs to, found on the node without the API server:
//!
//! network namespace -> the processes in it (`/proc/<pid>/ns/net`) -> their cgroup
//! (`/proc/<pid>/cgroup`, [`cgroup`]) -> the pod's UID -> the pod's namespace and name, from
//! the container runtime over its CRI socket ([`runtime`], [`cri`]) where there is one, and
//! from the kubelet's pod log directory `/var/log/pods/<namespace>_<name>_<uid>` ([`logs`])
//! for pods the runtime does not name.
//!
//! Every pod has at least its sandbox (pause) process in its namespace, and the kubelet makes
//! the log directory before any container starts, so a running pod is found this way.
mod cgroup;
mod cri;
pub mod cri_messages;
mod logs;
mod runtime;

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
};

pub use cri::CriSocket;
pub use logs::PodName;
pub use runtime::RuntimePods;

/// Where the kubelet keeps its pods' logs, one directory per pod.
pub const POD_LOGS: &str = "/var/log/pods";

/// Names the pods behind network namespaces.
pub struct PodNames {
    proc: PathBuf,
    pod_logs: PathBuf,
    /// The container runtime's pods, when dnsloop asks it.
    runtime: Option<RuntimePods>,
    /// An unreadable pod log directory, or a pod missing from it, is reported once, not at
    /// every new pod or every attempt to name it.
    reported_unreadable: AtomicBool,
    reported_missing: AtomicBool,
}

impl PodNames {
    /// Reads this node's `/proc`, asks `runtime`, and reads the pod log directory `pod_logs`
    /// for the pods `runtime` does not name.
    pub fn new(pod_logs: PathBuf, runtime: Option<RuntimePods>) -> Self {
        Self::below(Path::new("/proc"), pod_logs, runtime)
    }

    /// Reads `proc` as the node's `/proc` (a copy of one, in tests).
    pub fn below(proc: &Path, pod_logs: PathBuf, runtime: Option<RuntimePods>) -> Self {
        Self {
            proc: proc.into(),
            pod_logs,
            runtime,
            reported_unreadable: AtomicBool::new(false),
            reported_missing: AtomicBool::new(false),
        }
    }

    /// The pods the network namespaces with inode numbers `netns_inodes` belong to, where
    /// known: a namespace whose processes are in no pod (the node's own, a lab's), or in
    /// several, or whose pod neither the runtime nor the log directory names, is left out.
    pub fn of_namespaces(&self, netns_inodes: &HashSet<u64>) -> HashMap<u64, PodName> {
        let mut uids = HashMap::new();
        for (netns, uids_in_it) in self.pod_uids(netns_inodes) {
            if uids_in_it.len() == 1 {
                uids.extend(uids_in_it.into_iter().map(|uid| (netns, uid)));
            } else {
                tracing::debug!(
                    "network namespace {netns} holds processes of several pods ({uids_in_it:?}): \
                     naming it by its address"
                );
            }
        }
        let mut pods = HashMap::new();
        let mut unnamed = Vec::new();
        for (netns, uid) in uids {
            match self.runtime.as_ref().and_then(|runtime| runtime.pod(&uid)) {
                Some(pod) => {
                    pods.insert(netns, pod);
                }
                None => unnamed.push((netns, uid)),
            }
        }
        if unnamed.is_empty() {
            return pods;
        }
        let logged = match logs::read_pod_logs(&self.pod_logs) {
            Ok(logged) => logged,
            Err(error) => {
                report_once(
                    &self.reported_unreadable,
                    &format!(
                        "{} are named by their addresses: reading the kubelet's pod log \
                         directory {} failed ({error}); mount the node's {POD_LOGS} for dnsloop, \
                         or point --pod-logs at it",
                        self.runtime
                            .as_ref()
                            .map_or("pods".into(), |runtime| format!(
                                "pods the container runtime at {} does not name",
                                runtime.socket().display()
                            )),
                        self.pod_logs.display()
                    ),
                );
                return pods;
            }
        };
        for (netns, uid) in unnamed {
            match logged.get(&uid) {
                Some(pod) => {
                    pods.insert(netns, pod.clone());
                }
                None => report_once(
                    &self.reported_missing,
                    &format!(
                        "pod {uid} {}has no directory in {}: naming it by its address (is \
                         --pod-logs the kubelet's pod log directory, {POD_LOGS}?)",
                        self.runtime
                            .as_ref()
                            .map_or(String::new(), |runtime| format!(
                                "is not running on the container runtime at {} and ",
                                runtime.socket().display()
                            )),
                        self.pod_logs.display()
                    ),
                ),
            }
        }
        pods
    }

    /// The UIDs of the pods the processes in each of `netns_inodes` belong to.
    fn pod_uids(&self, netns_inodes: &HashSet<u64>) -> HashMap<u64, HashSet<String>> {
        let mut uids: HashMap<u64, HashSet<String>> = HashMap::new();
        if netns_inodes.is_empty() {
            return uids;
        }
        let Ok(processes) = std::fs::read_dir(&self.proc) else {
            return uids;
        };
        // Processes come and go while we look: one that went away is skipped.
        for process in processes.flatten() {
            let is_pid = process
                .file_name()
                .to_str()
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()));
            if !is_pid {
                continue;
            }
            let dir = process.path();
            let Some(netns) = std::fs::read_link(dir.join("ns/net"))
                .ok()
                .and_then(|link| netns_inode(&link))
            else {
                continue;
            };
            if !netns_inodes.contains(&netns) {
                continue;
            }
            let uid = std::fs::read_to_string(dir.join("cgroup"))
                .ok()
                .and_then(|cgroup| cgroup::pod_uid(&cgroup));
            if let Some(uid) = uid {
                uids.entry(netns).or_default().insert(uid);
            }
        }
        uids
    }
}

/// Warns with `message` the first time `reported` is set, and only logs it for debugging after.
fn report_once(reported: &AtomicBool, message: &str) {
    if reported.swap(true, Ordering::Relaxed) {
        tracing::debug!("{message}");
    } else {
        tracing::warn!("{message}");
    }
}

/// The inode number in a `/proc/<pid>/ns/net` link (`net:[4026531840]`): the same number a
/// `stat` of any file of that namespace gives.
fn netns_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::symlink};

    use super::*;

    const COREDNS_NETNS: u64 = 4026532301;
    const CLIENT_NETNS: u64 = 4026532302;
    const SHARED_NETNS: u64 = 4026532303;
    const UNLOGGED_NETNS: u64 = 4026532304;
    const LAB_NETNS: u64 = 4026532305;
    const COREDNS_UID: &str = "4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11";
    const CLIENT_UID: &str = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d";
    const UNLOGGED_UID: &str = "00000000-1111-4222-8333-444444444444";

    /// A node's `/proc` and `/var/log/pods`, as files.
    struct Node {
        dir: tempfile::TempDir,
    }

    impl Node {
        fn new() -> Self {
            let node = Self {
                dir: tempfile::tempdir().expect("create a temporary directory"),
            };
            fs::create_dir_all(node.proc()).unwrap();
            fs::create_dir_all(node.pod_logs()).unwrap();
            node
        }

        fn proc(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        fn pod_logs(&self) -> PathBuf {
            self.dir.path().join("var/log/pods")
        }

        fn process(&self, pid: u32, netns: u64, cgroup: &str) {
            let dir = self.proc().join(pid.to_string());
            fs::create_dir_all(dir.join("ns")).unwrap();
            symlink(format!("net:[{netns}]"), dir.join("ns/net")).unwrap();
            fs::write(dir.join("cgroup"), cgroup).unwrap();
        }

        fn pod_log_dir(&self, name: &str) {
            fs::create_dir_all(self.pod_logs().join(name).join("container")).unwrap();
        }

        fn names(&self) -> PodNames {
            PodNames::below(&self.proc(), self.pod_logs(), None)
        }

        /// Names pods after `runtime`'s listing first.
        async fn names_with_runtime(&self, runtime: Vec<PodName>) -> PodNames {
            let runtime =
                RuntimePods::start_listing("/run/containerd/containerd.sock".into(), move || {
                    std::future::ready(Ok::<_, cri::CriError>(runtime.clone()))
                })
                .await;
            PodNames::below(&self.proc(), self.pod_logs(), Some(runtime))
        }
    }

    fn systemd_cgroup(uid: &str) -> String {
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-0123abcd.scope\n",
            uid.replace('-', "_")
        )
    }

    fn cgroupfs_cgroup(uid: &str) -> String {
        format!("4:memory:/kubepods/besteffort/pod{uid}/0123abcd\n0::/\n")
    }

    fn named(names: &PodNames, netns: &[u64]) -> HashMap<u64, String> {
        names
            .of_namespaces(&netns.iter().copied().collect())
            .into_iter()
            .map(|(netns, pod)| (netns, pod.to_string()))
            .collect()
    }

    #[test]
    fn a_namespace_is_named_after_the_pod_its_processes_are_in() {
        let node = Node::new();
        // The pause process and a container of each pod, and a process outside any pod.
        node.process(100, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        node.process(101, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        node.process(200, CLIENT_NETNS, &cgroupfs_cgroup(CLIENT_UID));
        node.process(300, LAB_NETNS, "0::/user.slice/session-1.scope\n");
        node.process(1, 4026531840, "0::/init.scope\n");
        node.pod_log_dir(&format!(
            "kube-system_coredns-5d78c9869d-abcde_{COREDNS_UID}"
        ));
        node.pod_log_dir(&format!("default_client_{CLIENT_UID}"));
        node.pod_log_dir("not-a-pod");
        fs::create_dir_all(node.proc().join("self")).unwrap();

        let names = named(
            &node.names(),
            &[COREDNS_NETNS, CLIENT_NETNS, LAB_NETNS, 4026539999],
        );
        assert_eq!(
            names,
            HashMap::from([
                (COREDNS_NETNS, "kube-system/coredns-5d78c9869d-abcde".into()),
                (CLIENT_NETNS, "default/client".into()),
            ])
        );
    }

    #[test]
    fn only_the_namespaces_asked_about_are_named() {
        let node = Node::new();
        node.process(100, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        node.pod_log_dir(&format!("kube-system_coredns-x_{COREDNS_UID}"));
        assert!(named(&node.names(), &[CLIENT_NETNS]).is_empty());
        assert!(named(&node.names(), &[]).is_empty());
    }

    #[test]
    fn an_ambiguous_or_unlogged_namespace_keeps_its_address() {
        let node = Node::new();
        // A process of another pod that entered this namespace (nsenter keeps its cgroup).
        node.process(100, SHARED_NETNS, &systemd_cgroup(COREDNS_UID));
        node.process(101, SHARED_NETNS, &systemd_cgroup(CLIENT_UID));
        node.process(200, UNLOGGED_NETNS, &systemd_cgroup(UNLOGGED_UID));
        node.pod_log_dir(&format!("kube-system_coredns-x_{COREDNS_UID}"));
        node.pod_log_dir(&format!("default_client_{CLIENT_UID}"));
        assert!(named(&node.names(), &[SHARED_NETNS, UNLOGGED_NETNS]).is_empty());
    }

    #[test]
    fn without_a_pod_log_directory_no_pod_is_named() {
        let node = Node::new();
        node.process(100, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        fs::remove_dir(node.pod_logs()).unwrap();
        let names = node.names();
        assert!(named(&names, &[COREDNS_NETNS]).is_empty());
        // Said once (a warning), then quietly.
        assert!(names.reported_unreadable.load(Ordering::Relaxed));
        assert!(named(&names, &[COREDNS_NETNS]).is_empty());
    }

    fn pod(namespace: &str, name: &str, uid: &str) -> PodName {
        PodName {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_runtime_names_its_pods_and_the_log_directory_the_others() {
        let node = Node::new();
        node.process(100, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        node.process(200, CLIENT_NETNS, &cgroupfs_cgroup(CLIENT_UID));
        // Named differently in each, to tell which one named it.
        node.pod_log_dir(&format!("kube-system_coredns-in-logs_{COREDNS_UID}"));
        node.pod_log_dir(&format!("default_client_{CLIENT_UID}"));
        let names = node
            .names_with_runtime(vec![pod("kube-system", "coredns-in-cri", COREDNS_UID)])
            .await;
        assert_eq!(
            named(&names, &[COREDNS_NETNS, CLIENT_NETNS]),
            HashMap::from([
                (COREDNS_NETNS, "kube-system/coredns-in-cri".into()),
                (CLIENT_NETNS, "default/client".into()),
            ])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pods_the_runtime_names_need_no_log_directory() {
        let node = Node::new();
        node.process(100, COREDNS_NETNS, &systemd_cgroup(COREDNS_UID));
        fs::remove_dir(node.pod_logs()).unwrap();
        let names = node
            .names_with_runtime(vec![pod("kube-system", "coredns-x", COREDNS_UID)])
            .await;
        assert_eq!(
            named(&names, &[COREDNS_NETNS]),
            HashMap::from([(COREDNS_NETNS, "kube-system/coredns-x".into())])
        );
        assert!(!names.reported_unreadable.load(Ordering::Relaxed));
        // A pod the runtime does not run falls back to the missing directory, and says so.
        node.process(200, CLIENT_NETNS, &systemd_cgroup(CLIENT_UID));
        assert!(named(&names, &[CLIENT_NETNS]).is_empty());
        assert!(names.reported_unreadable.load(Ordering::Relaxed));
    }

    #[test]
    fn the_namespace_links_of_proc_give_inode_numbers() {
        assert_eq!(netns_inode(Path::new("net:[4026531840]")), Some(4026531840));
        for link in ["mnt:[4026531840]", "net:[]", "net:[x]", "net:4026531840"] {
            assert_eq!(netns_inode(Path::new(link)), None, "{link}");
        }
    }
}
