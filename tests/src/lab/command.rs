//! Running the programs the lab is built with (`ip`, `nft`, `sysctl`, `dig`, ...).
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context as _, Result};

/// Runs `argv` to completion and returns its output whatever its exit status.
pub(crate) fn output(argv: &[&str]) -> Result<Output> {
    let (program, args) = argv.split_first().context("empty command line")?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running `{}` (is {program} installed?)", argv.join(" ")))
}

/// Runs `argv` and fails, quoting its stderr, unless it exits with status 0.
pub(crate) fn run(argv: &[&str]) -> Result<String> {
    let output = output(argv)?;
    if !output.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
