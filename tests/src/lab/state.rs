//! A lab's state directory, `/run/dnsloop-lab/<prefix>/`: server configs, logs, nftables rule
//! files, captures, and `state.json`, which lets another process (`cargo xtask lab status`)
//! describe a lab it did not start.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

const STATE_ROOT: &str = "/run/dnsloop-lab";
const STATE_FILE: &str = "state.json";

/// Where every lab's state directory is.
pub(crate) fn root() -> &'static Path {
    Path::new(STATE_ROOT)
}

pub(crate) fn dir(prefix: &str) -> PathBuf {
    root().join(prefix)
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LabState {
    pub prefix: String,
    pub scenario: String,
    /// How many nodes; state files from before multi-node labs have none, and one node.
    #[serde(default = "one_node")]
    pub nodes: usize,
    pub namespaces: Vec<String>,
    pub servers: Vec<ServerState>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ServerState {
    pub server: String,
    /// The node it runs on (0 for the shared upstream).
    #[serde(default)]
    pub node: usize,
    pub pid: u32,
}

fn one_node() -> usize {
    1
}

impl LabState {
    pub(crate) fn save(&self) -> Result<()> {
        let path = dir(&self.prefix).join(STATE_FILE);
        let json = serde_json::to_string_pretty(self)?;
        fs::write(&path, json).with_context(|| format!("writing {}", path.display()))
    }

    /// The state of the lab named `prefix`, or `None` if no lab of that name was left up.
    pub(crate) fn load(prefix: &str) -> Result<Option<LabState>> {
        let path = dir(prefix).join(STATE_FILE);
        let json = match fs::read_to_string(&path) {
            Ok(json) => json,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
        };
        let state = serde_json::from_str(&json).with_context(|| {
            format!(
                "{} is not a lab state file: remove the lab with `cargo xtask lab down`",
                path.display()
            )
        })?;
        Ok(Some(state))
    }
}

/// Removes the state directory of `prefix`; a missing one is fine.
pub(crate) fn remove(prefix: &str) -> Result<()> {
    let dir = dir(prefix);
    match fs::remove_dir_all(&dir) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}
