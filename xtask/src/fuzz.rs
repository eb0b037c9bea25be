//! `cargo xtask fuzz`: libFuzzer on the shared parser (`parse_packet`) and on the userspace
//! decode path from packet bytes to written findings (`decode_packets`), each from the corpus
//! checked in with it. The time given is shared evenly between them.
//!
//! A crash fails the run, which names the input that caused it: libFuzzer leaves it under the
//! fuzz crate's `artifacts/<target>/`, and it becomes a regression test (and joins the corpus).
//! New inputs a run finds go to a scratch corpus, so a checked-in one changes only when someone
//! chooses what to keep.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{bail, Context as _, Result};

use crate::{command, setup};

struct Target {
    name: &'static str,
    /// The fuzz crate, from the workspace root.
    crate_dir: &'static str,
    /// How a crash's input becomes a regression test, once fixed.
    regression_test: &'static str,
}

const TARGETS: [Target; 2] = [
    Target {
        name: "parse_packet",
        crate_dir: "dnsloop-ebpf/shared/fuzz",
        regression_test: "make it a test in dnsloop-ebpf/shared/tests/parse/ that runs the parser \
                          on its bytes as the target does, and copy it into the corpus",
    },
    Target {
        name: "decode_packets",
        crate_dir: "dnsloop-userspace/core/fuzz",
        regression_test: "copy it into the corpus under a name that says what it was: \
                          `cargo test -p dnsloop-core` runs every input there",
    },
];

pub fn run(duration: Duration) -> Result<()> {
    setup::run()?;
    let targets = u32::try_from(TARGETS.len()).expect("a handful of targets");
    let each = (duration / targets).max(Duration::from_secs(1));
    // Every target runs, so that one crash does not hide another.
    let failures: Vec<String> = TARGETS
        .iter()
        .filter_map(|target| fuzz(target, each).err())
        .map(|error| format!("{error:#}"))
        .collect();
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

fn fuzz(target: &Target, duration: Duration) -> Result<()> {
    let name = target.name;
    let fuzz_dir = command::workspace_root().join(target.crate_dir);
    let checked_in = fuzz_dir.join("corpus").join(name);
    let artifacts = fuzz_dir.join("artifacts").join(name);
    let scratch = command::workspace_root()
        .join("target/fuzz-corpus")
        .join(name);
    std::fs::create_dir_all(&scratch).context("creating the scratch corpus")?;
    let before = files_in(&artifacts);
    eprintln!(
        "fuzz: {name} for {} s, from {}",
        duration.as_secs(),
        checked_in.display()
    );
    let outcome = command::run(
        Command::new("cargo")
            .current_dir(&fuzz_dir)
            // The workspace's cargo sets these for xtask; the fuzz build picks nightly itself.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .args(["+nightly", "fuzz", "run", name])
            .arg(&scratch)
            .arg(&checked_in)
            .arg("--")
            .arg(format!("-max_total_time={}", duration.as_secs()))
            .arg("-print_final_stats=1"),
    );
    let found: Vec<PathBuf> = files_in(&artifacts).difference(&before).cloned().collect();
    match (outcome, found.is_empty()) {
        (Ok(()), true) => Ok(()),
        (outcome, true) => outcome.with_context(|| format!("fuzz: {name} did not run")),
        (_, false) => {
            let reproduce: Vec<String> = found
                .iter()
                .map(|input| {
                    format!(
                        "  {}\n    reproduce: (cd {} && cargo +nightly fuzz run {name} {})",
                        input.display(),
                        target.crate_dir,
                        input.strip_prefix(&fuzz_dir).unwrap_or(input).display()
                    )
                })
                .collect();
            bail!(
                "fuzz: {name} failed on these inputs:\n{}\n  Once fixed, {} ({}).",
                reproduce.join("\n"),
                target.regression_test,
                checked_in.display(),
            )
        }
    }
}

/// The files in `dir`, none if it does not exist yet.
fn files_in(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default()
}
