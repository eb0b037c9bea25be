//! `dnsloop probe`: ask a resolver the question CoreDNS's `loop` plugin asks at startup, at any
//! time, and (with `--trace`) watch where it goes.
//!
//! The probe is `HINFO <random>.<random>.<zone>`: no resolver has an answer for it, so a
//! working one says NXDOMAIN (or SERVFAIL, or REFUSED) at once. A resolver in a forwarding loop
//! sends it round until something gives up: traced, the probe is seen re-entering a namespace,
//! and the loop analyzer reports it with its path, as it does for any question.
use std::{
    cell::Cell,
    collections::hash_map::RandomState,
    hash::BuildHasher as _,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use hickory_proto::{
    op::{Message, MessageType, OpCode, Query},
    rr::{Name, RecordType},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpStream, UdpSocket},
};

use clap::Args;
use dnsloop_core::sink::OutputFormat;
use dnsloop_core::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
    observation::Observation,
    present::{mnemonic, names::Names},
    schema::{ProbeRecord, ProbeResult, Record, SummarySource},
    sink::{self, Sink},
};

use crate::tracer::{self, Tracer};

/// With `--trace`, how long to keep watching after the last probe: a loop goes round in
/// milliseconds, and the analyzer reports within a second.
const LOOP_SETTLE: Duration = Duration::from_millis(1500);
/// Probes are never more than this many, whatever `--count` says.
const MAX_PROBES: u32 = 100;

/// What `run` concluded, for the exit status.
pub enum Verdict {
    /// Answered, and no loop was seen.
    Answered,
    /// The probe came back (a loop), or no probe was answered.
    Fault,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when a probe was answered and none came back, 1 when \
    none was answered or one came back (a loop), 2 when dnsloop could not run.\n\n\
    Examples:\n  \
    dnsloop probe 169.254.25.10                  # the node-local cache: rcode and timing\n  \
    dnsloop probe 10.96.0.10 --trace             # as root: does the probe come back?\n  \
    dnsloop probe [fd00::a]:53 --tcp --zone cluster.local"
)]
pub struct ProbeArgs {
    /// The resolver to probe: an IP address, with an optional port (default 53).
    #[arg(value_name = "SERVER[:PORT]")]
    pub server: String,

    /// The zone the probe name is under, as CoreDNS uses its server block's zone.
    #[arg(long, default_value = ".")]
    pub zone: String,

    /// Probes to send, one after the other (at most 100).
    #[arg(long, default_value_t = 1)]
    pub count: u32,

    /// Send over TCP instead of UDP.
    #[arg(long)]
    pub tcp: bool,

    /// How long to wait for each probe's answer.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s", value_name = "DURATION")]
    pub timeout: Duration,

    /// Watch the node while the probes travel (needs root, as `trace`): report whether a probe
    /// came back, how many times, and its path.
    #[arg(long)]
    pub trace: bool,

    /// Output format on stdout.
    #[arg(long, value_parser = super::output_format(), default_value = "text")]
    pub output: OutputFormat,
}

pub fn run(args: ProbeArgs) -> anyhow::Result<Verdict> {
    let server = parse_server(&args.server)?;
    if !(1..=MAX_PROBES).contains(&args.count) {
        anyhow::bail!(
            "--count must be between 1 and {MAX_PROBES}, not {}",
            args.count
        );
    }
    let name = probe_name(&args.zone)?;
    let qname = name.to_ascii();
    let runtime = tracer::runtime()?;
    let loop_count = Cell::new(0);
    let outcomes = if args.trace {
        let stdout = std::io::stdout();
        let sink = ProbeFindings {
            inner: sink::for_format(
                args.output,
                &sink::NodeName::from_environment(),
                &Names::AsSent,
                stdout.lock(),
            ),
            qname: &qname,
            loop_count: &loop_count,
        };
        runtime.block_on(async {
            let end = tracer::end_of_run(None)?;
            let probing = async {
                let outcomes = send_probes(&args, server, &name).await;
                tokio::time::sleep(LOOP_SETTLE).await;
                Some(outcomes)
            };
            // The whole node, with tracing's defaults.
            let mut tracer = Tracer::start(&tracer::Config::default()).await?;
            let mut pipeline = tracer.pipeline(tracer.counted(Box::new(sink)));
            let ended = tracer
                .run(&mut pipeline, async {
                    tokio::select! {
                        outcomes = probing => outcomes,
                        () = end => None,
                    }
                })
                .await?;
            tracer.finish(pipeline)?;
            ended.context("interrupted before the probes were done")
        })?
    } else {
        runtime.block_on(send_probes(&args, server, &name))
    };
    let looped = args.trace.then(|| loop_count.get());
    report(&args, server, &qname, &outcomes, looped)?;
    let answered = outcomes.iter().any(|outcome| outcome.rcode.is_some());
    Ok(if answered && looped.unwrap_or(0) == 0 {
        Verdict::Answered
    } else {
        Verdict::Fault
    })
}

/// `SERVER[:PORT]`: `10.96.0.10`, `10.96.0.10:5353`, `fd00::a`, `[fd00::a]:53`.
fn parse_server(text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    text.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| {
            anyhow::anyhow!(
                "{text:?} is not a server address: give an IP address, with an optional port \
                 (10.96.0.10, 10.96.0.10:53, [fd00::a]:53)"
            )
        })
}

/// `<random>.<random>.<zone>`, as CoreDNS's loop plugin names its probe.
fn probe_name(zone: &str) -> anyhow::Result<Name> {
    let random = || RandomState::new().hash_one(Instant::now()) % 10_000_000_000_000_000_000;
    let zone = zone.trim_end_matches('.');
    let text = if zone.is_empty() {
        format!("{}.{}.", random(), random())
    } else {
        format!("{}.{}.{zone}.", random(), random())
    };
    Name::from_ascii(&text)
        .with_context(|| format!("{zone:?} is not a DNS zone name: give one like cluster.local"))
}

/// What one probe got.
struct Outcome {
    id: u16,
    /// `None` when no answer came within the timeout.
    rcode: Option<u16>,
    elapsed: Duration,
    /// Why the probe could not be sent or its answer read, if so.
    error: Option<String>,
}

async fn send_probes(args: &ProbeArgs, server: SocketAddr, name: &Name) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for _ in 0..args.count {
        let id = (RandomState::new().hash_one(Instant::now()) & 0xffff) as u16;
        let started = Instant::now();
        let exchanged = tokio::time::timeout(args.timeout, exchange(args.tcp, server, id, name));
        let (rcode, error) = match exchanged.await {
            Ok(Ok(rcode)) => (Some(rcode), None),
            Ok(Err(error)) => (None, Some(error.to_string())),
            Err(_) => (None, None),
        };
        outcomes.push(Outcome {
            id,
            rcode,
            elapsed: started.elapsed(),
            error,
        });
    }
    outcomes
}

/// Sends the probe with `id` and waits for its answer's rcode.
async fn exchange(tcp: bool, server: SocketAddr, id: u16, name: &Name) -> io::Result<u16> {
    let mut query = Message::new(id, MessageType::Query, OpCode::Query);
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(name.clone(), RecordType::HINFO));
    let wire = query
        .to_vec()
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
    loop {
        let reply = if tcp {
            exchange_tcp(server, &wire).await?
        } else {
            exchange_udp(server, &wire).await?
        };
        match Message::from_vec(&reply) {
            Ok(reply) if reply.id == id && reply.message_type == MessageType::Response => {
                return Ok(u16::from(reply.response_code));
            }
            // Not ours (a stray datagram) or not DNS: keep waiting, the timeout bounds it.
            _ if !tcp => continue,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the server's reply is not an answer to the probe",
                ))
            }
        }
    }
}

async fn exchange_udp(server: SocketAddr, wire: &[u8]) -> io::Result<Vec<u8>> {
    let local: SocketAddr = match server.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(wire).await?;
    let mut reply = vec![0; 65535];
    let len = socket.recv(&mut reply).await?;
    reply.truncate(len);
    Ok(reply)
}

async fn exchange_tcp(server: SocketAddr, wire: &[u8]) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(server).await?;
    let len = u16::try_from(wire.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "probe too long"))?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(wire).await?;
    let reply_len = stream.read_u16().await?;
    let mut reply = vec![0; usize::from(reply_len)];
    stream.read_exact(&mut reply).await?;
    Ok(reply)
}

/// Passes on the findings about the probe, and counts how many times it came back; the
/// node's other traffic is not what was asked about.
struct ProbeFindings<'a> {
    inner: Box<dyn Sink + 'a>,
    qname: &'a str,
    loop_count: &'a Cell<u64>,
}

impl Sink for ProbeFindings<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        // A possible loop is no proof that the probe came back.
        let Finding::Loop(found) = finding else {
            return Ok(());
        };
        if found.is_possible() {
            return self.inner.finding(finding);
        }
        if !found.qname.eq_ignore_ascii_case(self.qname) {
            return Ok(());
        }
        self.loop_count.set(self.loop_count.get().max(found.count));
        self.inner.finding(finding)
    }

    fn packet(&mut self, _obs: &Observation) -> io::Result<()> {
        Ok(())
    }

    fn malformed(&mut self, _sample: &MalformedSample) -> io::Result<()> {
        Ok(())
    }

    /// `probe --trace` records no bundles.
    fn bundle(&mut self, _notice: &BundleNotice) -> io::Result<()> {
        Ok(())
    }

    fn summary(&mut self, _summary: &Summary, _source: &SummarySource) -> io::Result<()> {
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn report(
    args: &ProbeArgs,
    server: SocketAddr,
    qname: &str,
    outcomes: &[Outcome],
    looped: Option<u64>,
) -> anyhow::Result<()> {
    let proto = if args.tcp { "tcp" } else { "udp" };
    match args.output {
        OutputFormat::Json => {
            let results = outcomes
                .iter()
                .map(|outcome| ProbeResult {
                    id: outcome.id,
                    rcode: outcome
                        .rcode
                        .map(|rcode| mnemonic::rcode(rcode).into_owned()),
                    ms: outcome.elapsed.as_secs_f64() * 1000.0,
                    error: outcome.error.clone(),
                })
                .collect();
            let record = Record::Probe(ProbeRecord {
                server,
                proto: proto.to_owned(),
                qname: qname.to_owned(),
                qtype: "HINFO".to_owned(),
                results,
                traced: looped.is_some(),
                looped: looped.map(|count| count > 0),
                came_back: looped,
            });
            println!("{}", serde_json::to_string(&record)?);
        }
        OutputFormat::Text => {
            println!("probe HINFO {qname} to {server} over {proto}");
            for outcome in outcomes {
                let result = match (outcome.rcode, &outcome.error) {
                    (Some(rcode), _) => format!(
                        "{} after {:.1} ms",
                        mnemonic::rcode(rcode),
                        outcome.elapsed.as_secs_f64() * 1000.0
                    ),
                    (None, Some(error)) => format!("failed: {error}"),
                    (None, None) => {
                        format!("no answer after {:.1} s", outcome.elapsed.as_secs_f64())
                    }
                };
                println!("  id {:5}: {result}", outcome.id);
            }
            match looped {
                Some(0) => println!("no loop: the probe never came back through this node"),
                Some(count) => {
                    println!("LOOP: the probe came back {count} time(s); its path is above")
                }
                None => println!("(run with --trace, as root, to see whether it comes back)"),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_addresses_with_an_optional_port() {
        assert_eq!(
            parse_server("10.96.0.10").unwrap(),
            "10.96.0.10:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("10.96.0.10:5353").unwrap(),
            "10.96.0.10:5353".parse().unwrap()
        );
        assert_eq!(
            parse_server("fd00::a").unwrap(),
            "[fd00::a]:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("[fd00::a]:54").unwrap(),
            "[fd00::a]:54".parse().unwrap()
        );
        let error = parse_server("kube-dns").unwrap_err().to_string();
        assert!(error.contains("is not a server address"), "{error}");
    }

    #[test]
    fn probe_names_are_two_random_labels_under_the_zone() {
        let name = probe_name("cluster.local").unwrap().to_ascii();
        let labels: Vec<&str> = name.split('.').collect();
        assert_eq!(labels.len(), 5, "{name}");
        assert!(labels[..2].iter().all(|label| label.parse::<u64>().is_ok()));
        assert_eq!(&labels[2..], ["cluster", "local", ""]);
        assert_ne!(name, probe_name("cluster.local").unwrap().to_ascii());
        assert_eq!(probe_name(".").unwrap().num_labels(), 2);
        assert!(probe_name("bad..zone").is_err());
    }
}
