//! The command line: the subcommands, and what their arguments share. Each command's own
//! arguments live beside its flow, in `commands`.
use clap::{builder::PossibleValue, error::ErrorKind, ArgMatches, Parser, Subcommand};
use dnsloop_core::sink::OutputFormat;
use dnsloop_ebpf::parse::MAX_DNS_PORTS;

use crate::commands::{
    analyze::AnalyzeArgs, capture::CaptureArgs, doctor::DoctorArgs, probe::ProbeArgs,
    trace::TraceArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "dnsloop",
    version,
    about = "Find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen",
    after_help = "Examples:\n  \
        dnsloop trace                          # the whole node: its interfaces, pods' loopbacks, new pods\n  \
        dnsloop trace -i cni0 -i eth0 --duration 30s\n  \
        dnsloop trace --output json | jq .\n  \
        dnsloop trace --packets -i cni0        # every DNS packet on the bridge\n  \
        dnsloop trace --metrics-addr 9553      # Prometheus metrics at http://127.0.0.1:9553/metrics\n  \
        dnsloop doctor --corefile coredns.yaml  # the node's DNS configuration, checked\n  \
        dnsloop analyze node.pcap              # the same findings, from a capture file"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Watch DNS on this node live (needs root: loads BPF programs).
    Trace(TraceArgs),
    /// Check the node's DNS configuration for loops and known faults (reads files only).
    #[command(after_help = "Examples:\n  \
        kubectl -n kube-system get configmap coredns -o yaml > coredns.yaml\n  \
        dnsloop doctor --corefile coredns.yaml\n  \
        dnsloop doctor --root /mnt/node --output json   # a node's disk mounted elsewhere\n\n\
        Exit status: 0 no errors, 1 errors found, 2 doctor could not run.")]
    Doctor(DoctorArgs),
    /// Send a CoreDNS-style loop probe to a resolver; with --trace, watch whether it comes back.
    Probe(ProbeArgs),
    /// Find the same faults in a capture file (pcap or pcapng), offline and unprivileged.
    Analyze(AnalyzeArgs),
    /// Trace every DNS packet for a while, then write a bundle for later: the packets as
    /// pcapng, and the findings and the node's DNS configuration as JSON and Markdown (root).
    Capture(CaptureArgs),
}

/// `--output`: text for a person at a terminal, JSON lines for a log shipper.
pub fn output_format() -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new([
        PossibleValue::new("text").help("One line per finding, for a person at a terminal"),
        PossibleValue::new("json").help("One JSON object per line, for a log shipper"),
    ])
    .map(|format| match format.as_str() {
        "json" => OutputFormat::Json,
        _ => OutputFormat::Text,
    })
}

/// `--dns-port`'s default, which `trace`, `capture` and `analyze` share so that all judge
/// packets alike.
pub const DEFAULT_DNS_PORT: u16 = 53;

/// `--dns-port`, as `trace` and `analyze` take it (flattened into their arguments).
///
/// The kernel programs and the parser have [`MAX_DNS_PORTS`] slots for ports. Clap bounds the
/// values of one occurrence, not how often an option is repeated, so the count is checked here,
/// as the arguments are taken from what clap parsed: one port too many is a usage error, like
/// any other, before anything runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsPortArgs {
    pub ports: Vec<u16>,
}

/// The option as clap derives it; [`DnsPortArgs`] adds the count.
#[derive(clap::Args)]
struct DnsPortOption {
    /// UDP/TCP port that carries DNS (repeatable, at most 8).
    #[arg(long = "dns-port", value_name = "PORT", default_values_t = [DEFAULT_DNS_PORT])]
    dns_ports: Vec<u16>,
}

impl clap::FromArgMatches for DnsPortArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let DnsPortOption { dns_ports } = DnsPortOption::from_arg_matches(matches)?;
        if dns_ports.len() > MAX_DNS_PORTS {
            return Err(clap::Error::raw(
                ErrorKind::TooManyValues,
                format!(
                    "--dns-port was given {} times: at most {MAX_DNS_PORTS} DNS ports can be given",
                    dns_ports.len()
                ),
            ));
        }
        Ok(Self { ports: dns_ports })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for DnsPortArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        DnsPortOption::augment_args(command)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        DnsPortOption::augment_args_for_update(command)
    }
}
/// `--timeout`'s and `--report-interval`'s defaults, shared by `trace` and `analyze`.
pub const DEFAULT_TIMEOUT: &str = "2s";
pub const DEFAULT_REPORT_INTERVAL: &str = "10s";

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// `dnsloop <command> --dns-port 5300 --dns-port 5301 ...`, with `count` ports.
    fn with_ports(command: &[&str], count: u16) -> Result<Cli, clap::Error> {
        let ports = (0..count).flat_map(|n| ["--dns-port".to_string(), (5300 + n).to_string()]);
        let words = ["dnsloop"]
            .iter()
            .chain(command)
            .map(|word| word.to_string());
        Cli::try_parse_from(words.chain(ports))
    }

    fn dns_ports(cli: Cli) -> Vec<u16> {
        match cli.command {
            Command::Trace(args) => args.dns_ports.ports,
            Command::Analyze(args) => args.dns_ports.ports,
            other => panic!("no --dns-port: {other:?}"),
        }
    }

    #[test]
    fn dns_ports_default_to_53_and_are_taken_as_given() {
        for command in [&["trace"][..], &["analyze", "node.pcap"]] {
            assert_eq!(dns_ports(with_ports(command, 0).unwrap()), [53]);
            assert_eq!(
                dns_ports(with_ports(command, 2).unwrap()),
                [5300, 5301],
                "{command:?}"
            );
        }
    }

    #[test]
    fn more_dns_ports_than_the_programs_hold_are_refused_on_the_command_line() {
        for command in [&["trace"][..], &["analyze", "node.pcap"]] {
            let eight = with_ports(command, 8).unwrap();
            assert_eq!(dns_ports(eight).len(), MAX_DNS_PORTS, "{command:?}");

            let error = with_ports(command, 9).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::TooManyValues, "{command:?}");
            // A usage error, as clap's own: exit status 2.
            assert_eq!(error.exit_code(), 2);
            let message = error.to_string();
            assert!(
                message.contains("--dns-port was given 9 times: at most 8 DNS ports can be given"),
                "{message}"
            );
        }
    }
}
