//! `cargo xtask test`: every test, from a fresh machine to a verdict.
use std::time::Duration;

use anyhow::Result;

use crate::{command, fuzz, kernels, setup};

/// How long CI fuzzes (the parser and the decode path, half each): long enough to go past the
/// corpus into new inputs.
const FUZZ_FOR: Duration = Duration::from_secs(120);

pub fn run() -> Result<()> {
    setup::run()?;
    // The end-to-end tests run this binary inside the lab's namespaces.
    command::cargo(&["build", "--bin", "dnsloop"])?;
    let dnsloop = command::workspace_root().join("target/debug/dnsloop");

    // The shared parser, on the host (its BPF build is exercised by the binary above).
    command::cargo(&["test", "-p", "dnsloop-ebpf", "--lib"])?;
    // Userspace unit tests, the lab tests and the end-to-end tests.
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
