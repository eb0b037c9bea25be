//! `dnsloop`: find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen.
//!
//! The layout is the architecture:
//! - `cli` and `commands`: the command line, one module per subcommand with its arguments and
//!   its flow;
//! - `tracer`: loads and attaches the kernel programs and runs the event loop that `trace`,
//!   `capture` and `probe --trace` drive;
//! - `kernel`: the programs' lifecycle (preflight, load, pin, attach, detach) and what they
//!   stream and count;
//! - `node`: the node model (links, pods' namespaces and names, the watch that follows them);
//! - `metrics`: the Prometheus exporter.
//!
//! What happens to a packet once read (decode, analyzers, enrichment, sinks) is the analysis
//! core, `dnsloop_core`, which builds without the BPF toolchain; `analyze` feeds it from a
//! capture file, the tracer from the kernel, and it never learns which.
//!
//! The library is the `dnsloop` binary ([`run`]). Besides, it lends the end-to-end tests the
//! CRI messages it asks the container runtime with ([`cri_messages`], for their stand-in
//! runtime), and the bench the kernel programs' profile (`profiling`, behind its feature).
mod cli;
mod commands;
mod kernel;
mod metrics;
mod node;
#[cfg(feature = "profiling")]
pub mod profiling;
mod tracer;

pub use node::pods::cri_messages;

use std::process::ExitCode;

use clap::Parser as _;

use commands::{analyze, capture, doctor, probe, trace};

/// Runs the `dnsloop` command line in this process's arguments, and returns its exit code: 0
/// when it ran and found nothing wrong, 1 for a fault found (`doctor`, `probe`), 2 when it
/// could not run (the error is printed on stderr first).
pub fn run() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Trace(args) => trace::run(args).map(|()| ExitCode::SUCCESS),
        // doctor has exit codes of its own: 1 for errors found on the node, 2 when it cannot run.
        cli::Command::Doctor(args) => return doctor::run(&args),
        cli::Command::Probe(args) => probe::run(args).map(|verdict| match verdict {
            probe::Verdict::Answered => ExitCode::SUCCESS,
            probe::Verdict::Fault => ExitCode::from(1),
        }),
        cli::Command::Analyze(args) => analyze::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Capture(args) => capture::run(args).map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|error| {
        eprintln!("dnsloop: {error:#}");
        // 1 is what doctor and probe report a fault with; 2 means dnsloop could not run.
        ExitCode::from(2)
    })
}
