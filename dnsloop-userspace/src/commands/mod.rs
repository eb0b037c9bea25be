//! One module per subcommand: its arguments and its flow, from parsed arguments to exit code;
//! and here, what their arguments share.
pub mod analyze;
pub mod capture;
pub mod doctor;
pub mod probe;
pub mod redact;
pub mod trace;

use clap::{builder::PossibleValue, error::ErrorKind, ArgMatches};
use dnsloop_core::sink::OutputFormat;
use dnsloop_shared::parse::MAX_DNS_PORTS;

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
    use crate::cli::{Cli, Command};

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
