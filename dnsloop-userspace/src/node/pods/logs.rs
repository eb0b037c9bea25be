//! Pod names from the kubelet's pod log directory, `/var/log/pods`: it makes one directory per
//! pod, `<namespace>_<name>_<uid>`, before the pod's containers start.
use std::{collections::HashMap, fmt, io, path::Path};

/// A pod as the API server names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for PodName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Longest namespace (a DNS-1123 label) and pod name (a DNS-1123 subdomain) Kubernetes accepts.
const MAX_NAMESPACE_LEN: usize = 63;
const MAX_NAME_LEN: usize = 253;
const MAX_UID_LEN: usize = 64;

impl PodName {
    /// The pod named so, if Kubernetes would accept those names: a namespace is a DNS-1123
    /// label, a pod's name a DNS-1123 subdomain, a UID a UUID (or a static pod's hash). So
    /// nothing else (or a byte that would upset a terminal) ever becomes a pod's name.
    pub fn checked(namespace: String, name: String, uid: String) -> Option<Self> {
        let dns = |text: &str, max: usize, dot: bool| {
            !text.is_empty()
                && text.len() <= max
                && text.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dot && b == b'.')
                })
        };
        let uid_valid = !uid.is_empty()
            && uid.len() <= MAX_UID_LEN
            && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        (dns(&namespace, MAX_NAMESPACE_LEN, false) && dns(&name, MAX_NAME_LEN, true) && uid_valid)
            .then_some(Self {
                namespace,
                name,
                uid,
            })
    }
}

/// The pod a directory of `/var/log/pods` is named after; `None` for any other name.
///
/// Neither a namespace, a pod name nor a UID can hold `_`, so the first `_` ends the namespace
/// and the last one starts the UID.
pub fn parse_dir_name(dir_name: &str) -> Option<PodName> {
    let (namespace, rest) = dir_name.split_once('_')?;
    let (name, uid) = rest.rsplit_once('_')?;
    PodName::checked(namespace.into(), name.into(), uid.into())
}

/// The pods that have a directory in `pod_logs`, by UID.
pub fn read_pod_logs(pod_logs: &Path) -> io::Result<HashMap<String, PodName>> {
    let mut pods = HashMap::new();
    for entry in std::fs::read_dir(pod_logs)? {
        // A pod's directory may go away while we read.
        let Ok(entry) = entry else { continue };
        if let Some(pod) = entry.file_name().to_str().and_then(parse_dir_name) {
            pods.insert(pod.uid.clone(), pod);
        }
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(dir_name: &str) -> Option<(String, String, String)> {
        parse_dir_name(dir_name).map(|pod| (pod.namespace, pod.name, pod.uid))
    }

    #[test]
    fn a_pod_directory_gives_namespace_name_and_uid() {
        assert_eq!(
            parsed("kube-system_coredns-5d78c9869d-abcde_4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11"),
            Some((
                "kube-system".into(),
                "coredns-5d78c9869d-abcde".into(),
                "4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11".into()
            ))
        );
        // Pod names are subdomains: dots are allowed. Static pods' UIDs are hashes.
        assert_eq!(
            parsed("kube-system_kube-apiserver-cp.example.com_3c5d8b7b2c3a0e5f9d1c7b4a6e8f0d2c"),
            Some((
                "kube-system".into(),
                "kube-apiserver-cp.example.com".into(),
                "3c5d8b7b2c3a0e5f9d1c7b4a6e8f0d2c".into()
            ))
        );
    }

    #[test]
    fn a_pod_is_shown_as_namespace_slash_name() {
        let pod = parse_dir_name("default_client_0b1c").unwrap();
        assert_eq!(pod.to_string(), "default/client");
    }

    #[test]
    fn other_names_are_no_pods() {
        for name in [
            // kubelets before 1.14 named the directory after the UID alone.
            "4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11",
            "default_client",
            "_client_0b1c",
            "default__0b1c",
            "default_client_",
            // Neither namespaces nor pod names have capitals, underscores or control bytes.
            "Default_client_0b1c",
            "default_my_client_0b1c",
            "default_cli\u{1b}[2Jent_0b1c",
            "kube.system_client_0b1c",
            "default_client_not-a-uid",
            ".hidden",
        ] {
            assert_eq!(parsed(name), None, "{name}");
        }
        assert_eq!(parsed(&format!("{}_client_0b1c", "a".repeat(64))), None);
    }
}
