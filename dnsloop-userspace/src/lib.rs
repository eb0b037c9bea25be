//! `dnsloop`: find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen.
//!
//! Data flow, readable from `trace`: the kernel programs (`programs`, attached by `attach` and
//! kept current by `watch` on the links `topology` lists, pods' loopbacks found by `namespaces`
//! and named by `pods`) stream packets to a `source`; the `pipeline` has the `decode`r turn them
//! into `observation`s at `points`, the `analyze` engine turn those into `finding`s, `enrich`
//! add the node's evidence, and a `sink` write them. `analyze` never learns which source a packet came from.
//! `analyze_file` feeds the same pipeline from a capture file (`source::capture_file`).
//!
//! The library is the `dnsloop` binary ([`run`]). Besides, it lends the end-to-end tests its
//! DNS-name escaper ([`DnsName`]) and the CRI messages it asks the container runtime with
//! ([`cri_messages`], for their stand-in runtime), and the fuzzer the decode path (`fuzzing`,
//! behind the feature of that name).
mod analyze;
mod analyze_file;
mod attach;
mod capture;
mod cli;
mod clsact;
mod counters;
mod decode;
mod doctor;
mod enrich;
mod expedited_rcu;
mod finding;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
#[cfg(test)]
mod kernel_tests;
mod metrics;
mod namespaces;
mod netns;
mod observation;
mod orphans;
mod pipeline;
mod pods;
mod points;
mod preflight;
mod probe;
#[cfg(feature = "profiling")]
pub mod profiling;
mod programs;
mod report;
mod sink;
mod source;
mod topology;
mod trace;
mod watch;

/// A DNS name as it was sent, and its presentation format (`\DDD` escapes, as dig writes it).
pub use observation::DnsName;

pub use pods::cri_messages;

use std::process::ExitCode;

use clap::Parser as _;

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
        cli::Command::Analyze(args) => analyze_file::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Capture(args) => capture::run(args).map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|error| {
        eprintln!("dnsloop: {error:#}");
        // 1 is what doctor and probe report a fault with; 2 means dnsloop could not run.
        ExitCode::from(2)
    })
}
