//! Developer and CI entry point: `cargo xtask setup|build|lab|demo|kernels|test`.
//!
//! Everything a fresh machine needs is installed by `setup`, and `demo` and `test` run it first,
//! so the README's two commands work from a fresh clone.
mod bench;
mod command;
mod demo;
mod dependencies;
mod doc_links;
mod fuzz;
mod kernels;
mod repeat;
mod setup;
mod test;

use anyhow::Result;
use clap::{Parser, Subcommand};
use dnsloop_tests::lab::{self, Scenario};

/// Name prefix of the lab that `cargo xtask lab up` leaves running.
const LAB_PREFIX: &str = "dnsloop";

#[derive(Parser)]
#[command(name = "xtask", about = "Build, lab and test tasks for dnsloop")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what is missing: nightly rust-src, Debian packages, bpf-linker (idempotent).
    Setup,
    /// Build the dnsloop binary (kernel programs included) in release mode.
    Build,
    /// Bring the node lab up or down, or show it.
    Lab {
        #[command(subcommand)]
        action: LabAction,
    },
    /// Show dnsloop on the lab.
    Demo,
    /// Boot Debian's kernels under QEMU (5.10 and 6.1, with the clsact fallback, and 6.12) and
    /// check dnsloop loads, attaches, counts DNS and reports drops there.
    Kernels {
        /// Only these kernel series (repeatable): 5.10, 6.1, 6.12.
        #[arg(long, value_name = "SERIES")]
        series: Vec<String>,
    },
    /// Run every test: unit, property, the privileged end-to-end tests on the lab, and the
    /// kernel matrix.
    Test {
        /// Instead, run the privileged suites (the lab, the end-to-end tests, the kernel
        /// programs) N times in a row under CI=true and count each test's failures: a test
        /// that fails even once is flaky, and fails CI as often.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
        repeat: Option<u16>,
    },
    /// Fuzz the shared packet/DNS parser and the userspace decode path, from their checked-in
    /// corpora.
    Fuzz {
        /// How long to fuzz, shared evenly between the two targets.
        #[arg(long, value_parser = parse_seconds, default_value = "120")]
        seconds: std::time::Duration,
    },
    /// Measure dnsloop's cost and speed on the lab, side by side with an empty program and
    /// tcpdump, and write BENCHMARKS.md (about 15 minutes).
    Bench {
        /// Instead, compare this build with an earlier dnsloop binary (a copy of
        /// target/release/dnsloop from before a change), in alternating pairs on the lab; prints
        /// a table and leaves BENCHMARKS.md alone.
        #[arg(long, value_name = "OLD_DNSLOOP")]
        compare: Option<std::path::PathBuf>,
        /// Instead, run only this piece of the bench on the lab and print its rows; leaves
        /// BENCHMARKS.md alone.
        #[arg(long, value_enum, value_name = "PIECE", conflicts_with = "compare")]
        only: Option<bench::Piece>,
        /// How long the soak runs, in minutes: mixed healthy and failing DNS on two nodes.
        #[arg(long, value_name = "MINUTES", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..))]
        soak_minutes: u64,
    },
}

#[derive(Subcommand)]
enum LabAction {
    /// Build a scenario's namespaces and start its DNS servers; it stays up until `lab down`.
    Up {
        scenario: Scenario,
        /// How many nodes, joined by a VXLAN overlay (1 to 3; default: the scenario's, 2 for
        /// the cluster-* scenarios, 1 for the others).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=lab::MAX_NODES as i64))]
        nodes: Option<u8>,
        #[command(flatten)]
        name: LabName,
    },
    /// Remove the lab's namespaces (every node's) and stop its servers.
    Down {
        #[command(flatten)]
        name: LabName,
    },
    /// Print the running lab's topology, node by node, and what each server forwards to.
    Status {
        #[command(flatten)]
        name: LabName,
    },
}

#[derive(clap::Args)]
struct LabName {
    /// The lab's name, which prefixes its namespaces (`<prefix>-node`, ...): another name
    /// keeps a second lab beside the first.
    #[arg(long, default_value = LAB_PREFIX)]
    prefix: String,
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Build => build_release().map(|_| ()),
        Task::Lab { action } => run_lab(action),
        Task::Demo => demo::run(),
        Task::Kernels { series } => kernels::run(&series),
        Task::Test { repeat } => match repeat {
            Some(rounds) => test::repeat(rounds.into()),
            None => test::run(),
        },
        Task::Bench {
            compare,
            only,
            soak_minutes,
        } => bench::run(
            compare.as_deref(),
            only,
            std::time::Duration::from_secs(soak_minutes * 60),
        ),
        Task::Fuzz { seconds } => fuzz::run(seconds),
    }
}

fn run_lab(action: LabAction) -> Result<()> {
    match action {
        LabAction::Up {
            scenario,
            nodes,
            name,
        } => {
            lab::down(&name.prefix)?;
            let nodes = nodes.map_or(scenario.default_nodes(), usize::from);
            let running = lab::Lab::builder(scenario)
                .prefix(&name.prefix)
                .nodes(nodes)
                .start()?;
            println!("{}", running.describe());
            running.keep();
        }
        LabAction::Down { name } => lab::down(&name.prefix)?,
        LabAction::Status { name } => match lab::status(&name.prefix)? {
            Some(description) => println!("{description}"),
            None => println!(
                "no lab `{}` is up: start one with `cargo xtask lab up <scenario> [--nodes N]`",
                name.prefix
            ),
        },
    }
    Ok(())
}

/// Builds `target/release/dnsloop` and returns its path.
fn build_release() -> Result<std::path::PathBuf> {
    setup::run()?;
    command::cargo(&["build", "--release", "--bin", "dnsloop"])?;
    Ok(command::workspace_root().join("target/release/dnsloop"))
}

fn parse_seconds(text: &str) -> Result<std::time::Duration, std::num::ParseIntError> {
    text.parse().map(std::time::Duration::from_secs)
}
