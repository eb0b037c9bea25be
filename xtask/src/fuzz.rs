//! `cargo xtask fuzz`: the shared parser under libFuzzer, from the corpus checked in with it.
//!
//! A crash fails the run, and libFuzzer leaves the input that caused it under
//! `dnsloop-ebpf/fuzz/artifacts/`: it becomes a regression test of the parser (and joins the
//! corpus). New inputs the run finds go to a scratch corpus, so the checked-in one changes only
//! when someone chooses what to keep.
use std::{process::Command, time::Duration};

use anyhow::{Context as _, Result};

use crate::{command, setup};

const TARGET: &str = "parse_packet";

pub fn run(duration: Duration) -> Result<()> {
    setup::run()?;
    let fuzz_dir = command::workspace_root().join("dnsloop-ebpf/fuzz");
    let checked_in = fuzz_dir.join("corpus").join(TARGET);
    let scratch = command::workspace_root()
        .join("target/fuzz-corpus")
        .join(TARGET);
    std::fs::create_dir_all(&scratch).context("creating the scratch corpus")?;
    eprintln!(
        "fuzz: {TARGET} for {} s, from {}",
        duration.as_secs(),
        checked_in.display()
    );
    command::run(
        Command::new("cargo")
            .current_dir(&fuzz_dir)
            // The workspace's cargo sets these for xtask; the fuzz build picks nightly itself.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .args(["+nightly", "fuzz", "run", TARGET])
            .arg(&scratch)
            .arg(&checked_in)
            .arg("--")
            .arg(format!("-max_total_time={}", duration.as_secs()))
            .arg("-print_final_stats=1"),
    )
}
