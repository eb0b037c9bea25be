//! Running external commands with errors that say which command failed.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Runs `command`, inheriting stdio, and fails unless it exits 0.
pub fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

/// Runs `cargo ARGS` in the workspace root with the same cargo that runs xtask.
pub fn cargo(args: &[&str]) -> Result<()> {
    run(cargo_command().args(args))
}

pub fn cargo_command() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

/// True when `program ARGS` runs and its stdout contains `needle`.
pub fn output_contains(program: &str, args: &[&str], needle: &str) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).contains(needle))
        .unwrap_or(false)
}
