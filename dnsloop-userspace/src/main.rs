//! `dnsloop`: find DNS forwarding loops and broken DNS paths on a Kubernetes node while they
//! happen. The commands live in the `dnsloop_userspace` library; the binary sets up logging.
use std::process::ExitCode;

fn main() -> ExitCode {
    // Logs go to stderr; stdout carries only results, so it can be piped to a log shipper.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DNSLOOP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    dnsloop_userspace::run()
}
