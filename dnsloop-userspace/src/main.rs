//! `dnsloop`: find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen.
//!
//! Data flow, readable from `trace`: the kernel programs (`programs`, attached by `attach` and
//! kept current by `watch` on the links `topology` lists, pods' loopbacks found by `namespaces`)
//! stream packets to a `source`; the `pipeline` has the `decode`r turn them into `observation`s
//! at `points`, the `analyze` engine turn those into `finding`s, `enrich` add the node's
//! evidence, and a `sink` write them. `analyze` never learns which source a packet came from.
//! `analyze_file` feeds the same pipeline from a capture file (`source::capture_file`).
mod analyze;
mod analyze_file;
mod attach;
mod cli;
mod counters;
mod decode;
mod enrich;
mod finding;
#[cfg(test)]
mod kernel_tests;
mod namespaces;
mod netns;
mod observation;
mod pipeline;
mod points;
mod programs;
mod report;
mod sink;
mod source;
mod topology;
mod trace;
mod watch;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    // Logs go to stderr; stdout carries only results, so it can be piped to a log shipper.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DNSLOOP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();

    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Trace(args) => trace::run(args),
        cli::Command::Analyze(args) => analyze_file::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dnsloop: {error:#}");
            ExitCode::FAILURE
        }
    }
}
