//! `cargo xtask test`: every test, from a fresh machine to a verdict.
use std::{process::Command, time::Duration};

use anyhow::{Context as _, Result};

use crate::{command, fuzz, kernels, repeat, setup};

/// How long CI fuzzes (the parser and the decode path, half each): long enough to go past the
/// corpus into new inputs.
const FUZZ_FOR: Duration = Duration::from_secs(120);

pub fn run() -> Result<()> {
    // Formatting first: it needs nothing installed and takes a second.
    check_formatting()?;
    // Clippy runs dnsloop-userspace's build script, which builds the kernel programs: setup
    // installs what that takes.
    setup::run()?;
    check_lints()?;
    // The end-to-end tests run this binary inside the lab's namespaces.
    command::cargo(&["build", "--bin", "dnsloop"])?;
    let dnsloop = command::workspace_root().join("target/debug/dnsloop");

    // The shared parser and records, userspace's unit tests, the lab tests and the end-to-end
    // tests (the kernel programs' own crate builds for BPF only: the binary above holds it).
    command::run(
        command::cargo_command()
            .arg("test")
            .env(dnsloop_tests::DNSLOOP_BIN_ENV, &dnsloop),
    )?;
    // The same binary on a kernel it was not built on.
    kernels::check(&dnsloop)?;
    // The parser and the decode path under libFuzzer.
    fuzz::run(FUZZ_FOR)
}

/// `cargo xtask test --repeat ROUNDS`: the privileged suites, `rounds` times over, with what
/// they run built once.
pub fn repeat(rounds: usize) -> Result<()> {
    setup::run()?;
    command::cargo(&["build", "--bin", "dnsloop"])?;
    let dnsloop = command::workspace_root().join("target/debug/dnsloop");
    repeat::run(rounds, &dnsloop)
}

/// Fails unless every crate is formatted as `cargo fmt` would.
fn check_formatting() -> Result<()> {
    command::cargo(&["fmt", "--all", "--check"]).context(
        "the code is not formatted as rustfmt formats it (the diff is above): \
         run `cargo fmt --all` to format it",
    )
}

/// Fails on any clippy or compiler warning, in every target of every host crate, and in the
/// kernel programs, which clippy checks for the BPF target with the nightly toolchain that builds
/// them.
fn check_lints() -> Result<()> {
    command::run(
        Command::new("cargo")
            // The workspace's cargo sets these for xtask; `+nightly` picks the toolchain.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .current_dir(command::workspace_root())
            .args([
                "+nightly",
                "clippy",
                "-p",
                "dnsloop-ebpf",
                "--bins",
                "--release",
            ])
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .args(["--", "-D", "warnings"]),
    )
    .context(
        "clippy found errors or warnings in the kernel programs (listed above): fix them, then \
         check again with `cargo +nightly clippy -p dnsloop-ebpf --bins --release --target \
         bpfel-unknown-none -Z build-std=core -- -D warnings`",
    )?;
    command::cargo(&[
        "clippy",
        "--workspace",
        "--exclude",
        "dnsloop-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])
    .context(
        "clippy found errors or warnings (listed above): fix them, then check again with \
         `cargo clippy --workspace --exclude dnsloop-ebpf --all-targets -- -D warnings`",
    )
}
