//! What a kubelet leaves on a node for each pod, so that dnsloop names the lab's pods as it
//! would a real node's: a sandbox (pause) process holding the pod's network namespace, a cgroup
//! named after the pod's UID holding its processes (systemd driver, cgroup v2), and a log
//! directory `<namespace>_<name>_<uid>`.
//!
//! Nothing touches the host's own: the cgroups live under `dnsloop-lab-<prefix>/` at the root of
//! the cgroup v2 hierarchy, the log directories in the lab's state directory ([`pod_logs`]).
use std::{
    fs, io,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};

use super::{ip_netns, process, state, topology::Pod};

/// The lab's stand-in for `/var/log/pods`: `dnsloop trace --pod-logs` reads it.
pub(crate) fn pod_logs(prefix: &str) -> PathBuf {
    state::dir(prefix).join("pods")
}

/// One lab's pods, as a kubelet lays them out.
#[derive(Default)]
pub(crate) struct KubeletPods {
    pods: Vec<KubeletPod>,
}

struct KubeletPod {
    node: usize,
    pod: Pod,
    /// The pod's UID, as the API server would give it.
    uid: String,
    /// The pod's network namespace.
    namespace: String,
    /// The pod's cgroup, `.../kubepods-<qos>-pod<uid>.slice`.
    cgroup: PathBuf,
    /// `sleep infinity` in the pod's namespace, as the pause container; `None` while stopped.
    sandbox: Option<Child>,
}

impl KubeletPods {
    /// Gives `pod` of node `node` of lab `prefix`, whose network namespace is `namespace`, a
    /// UID, a log directory, a cgroup, and a sandbox process in that cgroup.
    pub(crate) fn start(
        &mut self,
        prefix: &str,
        node: usize,
        pod: Pod,
        namespace: &str,
    ) -> Result<()> {
        let uid = random_uuid()?;
        let log_dir = pod_logs(prefix).join(format!(
            "{}_{}_{uid}",
            pod.kubernetes_namespace(),
            pod.kubernetes_name_on(node)
        ));
        fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let qos = pod.qos_class();
        let cgroup = lab_cgroup(prefix)?.join(format!(
            "kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{}.slice",
            uid.replace('-', "_")
        ));
        self.pods.push(KubeletPod {
            node,
            pod,
            uid,
            namespace: namespace.to_owned(),
            cgroup,
            sandbox: None,
        });
        self.start_sandbox(node, pod)
    }

    /// Starts the sandbox process of `pod` on node `node` in its namespace and cgroup.
    pub(crate) fn start_sandbox(&mut self, node: usize, pod: Pod) -> Result<()> {
        let kubelet_pod = self.find_mut(node, pod)?;
        ensure!(
            kubelet_pod.sandbox.is_none(),
            "the sandbox of pod {} is running already",
            pod.name()
        );
        let sandbox = ip_netns::exec_command(&kubelet_pod.namespace, &["sleep", "infinity"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting the sandbox of pod {} in {}",
                    pod.name(),
                    kubelet_pod.namespace
                )
            })?;
        let pid = sandbox.id();
        // Kept before anything else can fail, so that the lab's teardown ends it.
        kubelet_pod.sandbox = Some(sandbox);
        self.adopt(node, pod, pid)
    }

    /// Ends the sandbox process of `pod` on node `node`; its namespace and network stay.
    pub(crate) fn stop_sandbox(&mut self, node: usize, pod: Pod) -> Result<()> {
        if let Some(mut sandbox) = self.find_mut(node, pod)?.sandbox.take() {
            process::terminate(&[sandbox.id()]);
            let _ = sandbox.wait();
        }
        Ok(())
    }

    /// The UID of `pod` on node `node`.
    pub(crate) fn uid(&self, node: usize, pod: Pod) -> Result<&str> {
        self.pods
            .iter()
            .find(|known| known.node == node && known.pod == pod)
            .map(|known| known.uid.as_str())
            .with_context(|| format!("node {node} runs no pod {}", pod.name()))
    }

    fn find_mut(&mut self, node: usize, pod: Pod) -> Result<&mut KubeletPod> {
        self.pods
            .iter_mut()
            .find(|known| known.node == node && known.pod == pod)
            .with_context(|| format!("node {node} runs no pod {}", pod.name()))
    }

    /// Moves process `pid` into a container cgroup of `pod` on node `node`, as the container
    /// runtime starts each container of a pod in a scope of its own.
    pub(crate) fn adopt(&self, node: usize, pod: Pod, pid: u32) -> Result<()> {
        let Some(kubelet_pod) = self
            .pods
            .iter()
            .find(|known| known.node == node && known.pod == pod)
        else {
            bail!("node {node} runs no pod {}", pod.name());
        };
        let container = kubelet_pod
            .cgroup
            .join(format!("cri-containerd-{}.scope", random_container_id()?));
        fs::create_dir_all(&container)
            .with_context(|| format!("creating cgroup {}", container.display()))?;
        let procs = container.join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .with_context(|| format!("moving process {pid} into {}", procs.display()))
    }

    /// The sandbox processes' PIDs, to be ended with the lab's servers.
    pub(crate) fn sandbox_pids(&self) -> Vec<u32> {
        self.pods
            .iter()
            .filter_map(|pod| pod.sandbox.as_ref().map(Child::id))
            .collect()
    }

    /// Reaps the sandboxes once they have been ended.
    pub(crate) fn reap(&mut self) {
        for sandbox in self.pods.iter_mut().filter_map(|pod| pod.sandbox.as_mut()) {
            let _ = sandbox.wait();
        }
    }
}

/// How long [`remove`] waits for the lab's processes to leave their cgroups.
const CGROUP_EMPTY_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);

/// Removes the cgroups of lab `prefix` once the processes in them have ended; nothing to
/// remove is fine. Its log directories go with the state directory.
pub(crate) fn remove(prefix: &str) -> Result<()> {
    let Some(root) = cgroup2_mount()? else {
        return Ok(());
    };
    let lab = root.join(lab_cgroup_name(prefix));
    let deadline = Instant::now() + CGROUP_EMPTY_TIMEOUT;
    loop {
        match remove_tree(&lab) {
            Ok(()) => return Ok(()),
            // A process killed a moment ago may not have left its cgroup yet.
            Err(error)
                if error.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
            {
                thread::sleep(POLL);
            }
            Err(error) => {
                return Err(error).with_context(|| {
                    format!(
                        "removing cgroup {} (a process still in it? `cat {}/**/cgroup.procs`)",
                        lab.display(),
                        lab.display()
                    )
                })
            }
        }
    }
}

/// Removes `dir` and the cgroups below it, leaves first (a cgroup is removed with rmdir).
fn remove_tree(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

fn lab_cgroup_name(prefix: &str) -> String {
    format!("dnsloop-lab-{prefix}")
}

/// Where lab `prefix`'s cgroups go: at the root of the cgroup v2 hierarchy, which has no
/// controllers to keep processes out of inner cgroups, beside the host's own.
fn lab_cgroup(prefix: &str) -> Result<PathBuf> {
    let root = cgroup2_mount()?.context(
        "no cgroup v2 hierarchy is mounted (the lab puts its pods' processes in cgroups named \
         as the kubelet names them): mount one with `mount -t cgroup2 none /sys/fs/cgroup`",
    )?;
    Ok(root.join(lab_cgroup_name(prefix)))
}

/// The mount point of the cgroup v2 hierarchy (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a host that mounts cgroup v1 too), if any.
fn cgroup2_mount() -> Result<Option<PathBuf>> {
    let mountinfo =
        fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    Ok(mountinfo.lines().find_map(|line| {
        // `id parent major:minor root mount-point options [optional...] - fstype source ...`
        let (mount, filesystem) = line.split_once(" - ")?;
        if filesystem.split(' ').next()? != "cgroup2" {
            return None;
        }
        mount
            .split(' ')
            .nth(4)
            .map(|point| PathBuf::from(unescape(point)))
    }))
}

/// mountinfo escapes space, tab, newline and backslash as `\040`, ...
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// A random UUID, as the API server gives each pod.
fn random_uuid() -> Result<String> {
    let uuid = fs::read_to_string("/proc/sys/kernel/random/uuid")
        .context("reading /proc/sys/kernel/random/uuid")?;
    Ok(uuid.trim().to_owned())
}

/// 64 hex digits, as containerd names a container.
fn random_container_id() -> Result<String> {
    Ok(format!("{}{}", random_uuid()?, random_uuid()?).replace('-', ""))
}
