//! Network namespaces by name, through iproute2's `ip netns`: create, list, delete, and run a
//! command inside one.
use std::{path::PathBuf, process::Command, sync::Mutex};

use anyhow::{Context as _, Result};

use super::command;

/// Where `ip netns add` mounts a namespace.
pub(crate) fn path(namespace: &str) -> PathBuf {
    PathBuf::from("/var/run/netns").join(namespace)
}

/// The first `ip netns add` on a machine turns /run/netns into a shared mount; two of them
/// racing can stack two mounts and hide namespaces. Parallel tests share this process, so
/// serialising here is enough.
static ADD_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn add(namespace: &str) -> Result<()> {
    let _serialised = ADD_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    command::run(&["ip", "netns", "add", namespace])
        .with_context(|| format!("creating network namespace {namespace}"))?;
    Ok(())
}

pub(crate) fn delete(namespace: &str) -> Result<()> {
    command::run(&["ip", "netns", "delete", namespace])
        .with_context(|| format!("deleting network namespace {namespace}"))?;
    Ok(())
}

/// Names of the namespaces that `ip netns list` shows starting with `<prefix>-`.
pub(crate) fn list_with_prefix(prefix: &str) -> Result<Vec<String>> {
    let listing = command::run(&["ip", "netns", "list"])?;
    let start = format!("{prefix}-");
    Ok(listing
        .lines()
        // Lines look like "name (id: 3)" or just "name".
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with(&start))
        .map(str::to_owned)
        .collect())
}

/// PIDs of the processes whose network namespace is `namespace`.
pub(crate) fn pids(namespace: &str) -> Result<Vec<u32>> {
    let listing = command::run(&["ip", "netns", "pids", namespace])?;
    Ok(listing
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect())
}

/// `ip -n NAMESPACE ARGS...`: configures links, addresses and routes inside `namespace`.
pub(crate) fn ip(namespace: &str, args: &[&str]) -> Result<()> {
    let argv: Vec<&str> = ["ip", "-n", namespace]
        .iter()
        .chain(args)
        .copied()
        .collect();
    command::run(&argv)?;
    Ok(())
}

/// Sets sysctls (`key=value`) inside `namespace`; `net.*` sysctls are per namespace.
pub(crate) fn sysctl(namespace: &str, settings: &[&str]) -> Result<()> {
    let argv: Vec<&str> = ["sysctl", "-q", "-w"]
        .iter()
        .chain(settings)
        .copied()
        .collect();
    command::run(&exec_argv(namespace, &argv))
        .with_context(|| format!("setting {} in {namespace}", settings.join(" ")))?;
    Ok(())
}

/// `ip netns exec NAMESPACE ARGV...`, ready to be spawned or run.
pub(crate) fn exec_command(namespace: &str, argv: &[&str]) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", namespace]).args(argv);
    command
}

/// The argument vector of [`exec_command`], for [`command::run`] and [`command::output`].
pub(crate) fn exec_argv<'a>(namespace: &'a str, argv: &[&'a str]) -> Vec<&'a str> {
    ["ip", "netns", "exec", namespace]
        .iter()
        .chain(argv)
        .copied()
        .collect()
}
