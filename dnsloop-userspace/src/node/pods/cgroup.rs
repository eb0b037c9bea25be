//! The pod a process belongs to, read from its `/proc/<pid>/cgroup`: the kubelet puts every
//! container of a pod under a cgroup named after the pod's UID.
//!
//! ```text
//! 0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope
//! 0::/kubepods/besteffort/pod<uid>/<container id>
//! 4:memory:/kubepods/pod<uid>/<container id>
//! ```
//!
//! The first is the systemd cgroup driver (guaranteed pods sit straight under
//! `kubepods.slice` as `kubepods-pod<uid>.slice`), the second the cgroupfs driver; cgroup v1
//! repeats the path once per hierarchy. A kubelet with another cgroup root (kind's nodes:
//! `kubelet-kubepods-...`) only adds a prefix.

/// The UID of the pod whose cgroup a `/proc/<pid>/cgroup` file names, as the API server spells
/// it (`4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11`, or a static pod's 32 hex digits); `None` for a
/// process outside any pod.
pub fn pod_uid(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        // `hierarchy:controllers:path`; the path may itself hold colons.
        let path = line.splitn(3, ':').nth(2)?;
        pod_uid_of_path(path)
    })
}

/// Longest UID accepted: a UUID is 36 characters, a static pod's hash 32.
const MAX_UID_LEN: usize = 64;

fn pod_uid_of_path(path: &str) -> Option<String> {
    let mut components = path.split('/');
    // Pod cgroups live under the kubelet's `kubepods` cgroup; a `pod...` elsewhere (a user's
    // own cgroup, podman's `machine-libpod_pod_...`) is not a Kubernetes pod.
    components.find(|component| component.contains("kubepods"))?;
    components.find_map(|component| {
        let name = component.strip_suffix(".slice").unwrap_or(component);
        let uid = match name.strip_prefix("pod") {
            // cgroupfs: `pod<uid>`.
            Some(uid) => uid,
            // systemd: `kubepods-<qos>-pod<uid>`, with `_` for the UID's `-` (a `-` in a slice
            // name means nesting).
            None => name.rsplit_once("-pod")?.1,
        };
        let uid = uid.replace('_', "-");
        let valid = !uid.is_empty()
            && uid.len() <= MAX_UID_LEN
            && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        valid.then_some(uid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11";
    const CONTAINER: &str = "8d3c1f0a5b7e9d2c4a6f8e0b1d3c5a7f9e1b3d5c7a9f0e2d4c6b8a0f2e4d6c8b";

    fn uid_of(line: &str) -> Option<String> {
        pod_uid(line)
    }

    #[test]
    fn the_systemd_driver_spells_the_uid_with_underscores() {
        let slice_uid = UID.replace('-', "_");
        for line in [
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{CONTAINER}.scope"),
            format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice_uid}.slice/crio-{CONTAINER}.scope"),
            format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice_uid}.slice/crio-conmon-{CONTAINER}.scope"),
            // Guaranteed pods have no QoS slice.
            format!("0::/kubepods.slice/kubepods-pod{slice_uid}.slice/docker-{CONTAINER}.scope"),
            // The pause container's own cgroup is the pod's.
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice"),
            // kind: a node in a container, whose kubelet has its own cgroup root.
            format!("0::/system.slice/docker-{CONTAINER}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{slice_uid}.slice/cri-containerd-{CONTAINER}.scope"),
        ] {
            assert_eq!(uid_of(&line).as_deref(), Some(UID), "{line}");
        }
    }

    #[test]
    fn the_cgroupfs_driver_names_the_pod_cgroup_pod_uid() {
        for line in [
            format!("0::/kubepods/burstable/pod{UID}/{CONTAINER}"),
            format!("0::/kubepods/besteffort/pod{UID}/crio-{CONTAINER}"),
            format!("0::/kubepods/pod{UID}/{CONTAINER}"),
            format!("0::/kubepods/pod{UID}"),
        ] {
            assert_eq!(uid_of(&line).as_deref(), Some(UID), "{line}");
        }
    }

    #[test]
    fn cgroup_v1_names_the_pod_on_any_hierarchy() {
        let file = format!(
            "12:pids:/system.slice/containerd.service\n\
             11:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CONTAINER}\n\
             4:memory:/kubepods/besteffort/pod{UID}/{CONTAINER}\n\
             1:name=systemd:/kubepods/besteffort/pod{UID}/{CONTAINER}\n\
             0::/\n"
        );
        assert_eq!(pod_uid(&file).as_deref(), Some(UID));
    }

    #[test]
    fn a_static_pods_uid_is_its_manifest_hash() {
        let hash = "3c5d8b7b2c3a0e5f9d1c7b4a6e8f0d2c";
        let line =
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{hash}.slice/cri-containerd-{CONTAINER}.scope");
        assert_eq!(uid_of(&line).as_deref(), Some(hash));
    }

    #[test]
    fn processes_outside_pods_have_no_pod() {
        for file in [
            "0::/",
            "0::/system.slice/containerd.service",
            "0::/user.slice/user-1000.slice/session-3.scope",
            // podman's pods are not the kubelet's.
            "0::/machine.slice/machine-libpod_pod_6f1d3c.slice/libpod-6f1d3c.scope",
            // A `pod` outside kubepods.
            "0::/pod1234/x",
            // The kubelet's own cgroup, and a QoS cgroup holding no pod.
            "0::/kubepods.slice",
            "0::/kubepods/burstable",
            // Not a UID after all.
            "0::/kubepods/besteffort/podcast/x",
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod.slice",
            "",
            "garbage",
            "::",
        ] {
            assert_eq!(pod_uid(file), None, "{file}");
        }
    }

    #[test]
    fn a_v1_line_before_the_pods_own_is_skipped() {
        let file = format!(
            "4:memory:/process_api/0ff3e1bb37becd63f9ee3a6addc13df4\n\
             0::/lab/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{CONTAINER}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(pod_uid(&file).as_deref(), Some(UID));
    }
}
