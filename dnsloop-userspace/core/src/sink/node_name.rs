//! The node a tracer runs on, named in every JSON object so that a log pipeline can join the
//! findings of one loop from all the nodes it crosses.
use std::sync::Arc;

/// The environment variable a DaemonSet sets from the downward API's `spec.nodeName`.
const NODE_NAME_VARIABLE: &str = "NODE_NAME";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeName(Arc<str>);

impl NodeName {
    pub fn new(name: &str) -> Self {
        Self(name.into())
    }

    /// `NODE_NAME` when set, else the host name (Kubernetes' node name unless overridden),
    /// else `unknown`.
    pub fn from_environment() -> Self {
        let named = std::env::var(NODE_NAME_VARIABLE)
            .ok()
            .filter(|name| !name.trim().is_empty());
        let name = named.or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        });
        Self::new(name.as_deref().unwrap_or("unknown"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
