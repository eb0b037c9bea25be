//! `dnsloop analyze FILE`: the findings of `trace`, from a capture file.
//!
//! capture file -> placement -> pipeline (decoder -> analyzers -> sink on stdout), with no
//! evidence from this machine: the packets were seen elsewhere, or earlier. Time is the
//! capture's: the engine's clock is each packet's timestamp.
//!
//! The file is read twice. The first reading lists its interfaces, learns from MAC addresses
//! which side of a link is the node's (see `source::capture_file::placement`) and measures how
//! far out of timestamp order the file is; the second places each packet and feeds it, in
//! timestamp order, to the pipeline.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::{ensure, Context as _};
use dnsloop_shared::{parse::DnsPorts, point::Direction};

use clap::Args;
use dnsloop_core::sink::OutputFormat;
use dnsloop_core::{
    analyzers::{Engine, EngineConfig},
    answered_from::AnsweredFrom,
    bundle,
    decode::{Coverage, Decoder, NotDecoded, ReassemblyCounts},
    observation::Point,
    pipeline::Pipeline,
    schema::{
        CaptureFileInfo, CaptureFileSummary, CapturePackets, InterfaceCount, PlacedInterface,
        SummarySource,
    },
    sink,
    source::{
        capture_file::{
            self, link_names,
            order::TimeOrder,
            placement::{Placement, Survey},
            CaptureFile, CaptureInterface, CapturedPacket, Format,
        },
        RawPacket,
    },
};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tcpdump -i any -w node.pcap port 53       # on the node, then elsewhere:\n  \
    dnsloop analyze node.pcap\n  \
    dnsloop analyze --output json --packets bundle.pcapng\n  \
    dnsloop analyze --slow 200ms node.pcap     # lookups that slow, hop by hop\n  \
    dnsloop analyze /var/lib/dnsloop/record/dnsloop-2026-11-26T044704.747Z-loop-59fb06aa805f4f20\n\n\
    Captures of several interfaces (tcpdump -i any, or pcapng with interface names) show a \
    loop's path hop by hop; a capture of one interface shows what crossed it.")]
pub struct AnalyzeArgs {
    /// The capture to analyse: pcap or pcapng, as tcpdump, dumpcap/Wireshark or dnsloop write
    /// them; or the directory of a bundle `capture` or `trace --record` wrote, whose
    /// capture.pcapng is read.
    #[arg(value_name = "FILE|BUNDLE")]
    pub file: PathBuf,

    /// Output format on stdout.
    #[arg(long, value_parser = super::output_format(), default_value = "text")]
    pub output: OutputFormat,

    /// A query with no answer after this long, in the capture's time, is reported as a timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = super::DEFAULT_TIMEOUT, value_name = "DURATION")]
    pub timeout: Duration,

    /// A loop or an unexpected source going on is reported again, with its count, at most
    /// this often in the capture's time.
    #[arg(long, value_parser = humantime::parse_duration, default_value = super::DEFAULT_REPORT_INTERVAL, value_name = "DURATION")]
    pub report_interval: Duration,

    /// Print every DNS packet of the capture, at every interface it was captured on.
    #[arg(long)]
    pub packets: bool,

    /// Follow every client's query through the forwards it caused and report those answered
    /// this long or more after they were sent (e.g. 200ms), with the time spent at each hop,
    /// as `trace --slow` does.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub slow: Option<Duration>,

    /// `ip -o link` as printed on the node the capture was taken on: names the interfaces of a
    /// `tcpdump -i any` capture, which records only their numbers, so that each is placed by
    /// its name (an overlay device such as vxlan0 leads to other nodes, a veth to a pod).
    #[arg(long, value_name = "FILE")]
    pub links: Option<PathBuf>,

    /// The node the capture was taken on, named in every JSON object (`node`). Default: the
    /// NODE_NAME environment variable, else this host's name.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,

    #[command(flatten)]
    pub dns_ports: super::DnsPortArgs,

    #[command(flatten)]
    pub redact: super::redact::RedactArgs,
}

pub fn run(mut args: AnalyzeArgs) -> anyhow::Result<()> {
    let names = args.redact.names()?;
    if args.file.is_dir() {
        let bundle = args.file.clone();
        args.file = bundle.join(bundle::PCAPNG_FILE);
        ensure!(
            args.file.exists() || !bundle.join(bundle::JSON_REPORT).exists(),
            "{} holds no {}: it was written with --redact-names, which leaves the packets out; \
             its findings are in {} and {}",
            bundle.display(),
            bundle::PCAPNG_FILE,
            bundle::JSON_REPORT,
            bundle::MARKDOWN_REPORT
        );
    }
    let ports = DnsPorts::from_list(&args.dns_ports.ports)?;
    let mut surveyed = survey(&args.file, &ports)?;
    if let Some(links) = &args.links {
        let text = std::fs::read_to_string(links)
            .with_context(|| format!("reading the interface names in {}", links.display()))?;
        let names = link_names::parse_ip_link(&text);
        ensure!(
            !names.is_empty(),
            "{} names no interface: give it the output of `ip -o link` taken on the node the \
             capture comes from",
            links.display()
        );
        name_interfaces(&mut surveyed.interfaces, &names);
    }
    if let Some(stopped) = &surveyed.stopped {
        eprintln!("dnsloop: warning: {stopped}");
    }
    let mut placement = Placement::new(&surveyed.interfaces, &surveyed.survey, ports);
    let every_interface = capture_file::shows_every_interface(&surveyed.interfaces);
    let answered_from = answering_addresses(&args.file, &mut placement, ports, every_interface)?;
    let decoder = Decoder::new(ports, Coverage::EveryPacket);

    let node = args
        .node
        .as_deref()
        .map_or_else(sink::NodeName::from_environment, sink::NodeName::new);
    let engine = Engine::new(EngineConfig {
        timeout: args.timeout,
        loop_report_interval: args.report_interval,
        slow: args.slow,
        names: names.clone(),
        ..EngineConfig::default()
    });
    // Buffered, and written as the buffer fills rather than per packet (see `Pipeline::advance`).
    let stdout = std::io::BufWriter::with_capacity(sink::STDOUT_BUFFER, std::io::stdout().lock());
    let mut pipeline = Pipeline::without_enrichment(
        decoder,
        engine,
        sink::for_format(args.output, &node, &names, stdout),
        args.packets,
    )
    .knowing_answers(answered_from);
    let mut file = CaptureFile::open(&args.file)?;
    let mut order = TimeOrder::new(surveyed.survey.disorder);
    let mut counts = Counts::default();
    let mut clock = None;
    let mut take = |captured, pipeline: &mut Pipeline| -> anyhow::Result<()> {
        let ts = feed(captured, &mut placement, pipeline, &mut counts)?;
        clock = Some(clock.map_or(ts, |clock: SystemTime| clock.max(ts)));
        Ok(())
    };
    while let Some(captured) = file.next_packet() {
        order.push(captured);
        while let Some(captured) = order.pop_due() {
            take(captured, &mut pipeline)?;
        }
    }
    while let Some(captured) = order.pop() {
        take(captured, &mut pipeline)?;
    }

    // The capture ran at least until its last packet, and until its statistics say.
    let end = match (clock, file.end()) {
        (Some(clock), Some(end)) => clock.max(end),
        (clock, end) => clock.or(end).unwrap_or_else(SystemTime::now),
    };
    let capture = CaptureSummary {
        file: &args.file,
        format: file.format(),
        read: file.packets(),
        skipped: file.skipped(),
        stopped: file.stopped().map(ToString::to_string),
        interfaces: file.interfaces(),
        placement: &placement,
    };
    Ok(pipeline.finish(end, None, |_, reassembly| {
        capture.extra(&counts, &reassembly)
    })?)
}

/// What the first reading learnt.
struct Surveyed {
    interfaces: Vec<CaptureInterface>,
    survey: Survey,
    stopped: Option<String>,
}

fn survey(path: &Path, ports: &DnsPorts) -> anyhow::Result<Surveyed> {
    let mut file = CaptureFile::open(path)?;
    let mut survey = Survey::default();
    while let Some(captured) = file.next_packet() {
        survey.observe(&captured, ports);
    }
    Ok(Surveyed {
        interfaces: file.interfaces().to_vec(),
        survey,
        stopped: file.stopped().map(ToString::to_string),
    })
}

/// Where the capture shows servers answering from, and which queries hosts sent back in ICMP,
/// over the whole file: a cycle through a namespace is a loop only where it shows that the
/// namespace holds the address the question was sent to, and a server may answer only once the
/// loop has ended, a host send a query back only seconds after (a neighbour that never
/// answers).
fn answering_addresses(
    path: &Path,
    placement: &mut Placement,
    ports: DnsPorts,
    every_interface: bool,
) -> anyhow::Result<AnsweredFrom> {
    let mut decoder = Decoder::new(ports, Coverage::EveryPacket);
    let mut file = CaptureFile::open(path)?;
    // A capture of every interface shows whatever enters or leaves the node or a pod: what
    // entered one, never left and was forwarded at once was taken in there.
    let mut answered_from = if every_interface {
        AnsweredFrom::seeing_every_interface()
    } else {
        AnsweredFrom::default()
    };
    let mut observations = Vec::new();
    while let Some(captured) = file.next_packet() {
        let Some((packet, point)) = placed(captured, placement) else {
            continue;
        };
        // What does not decode is counted by the analysis proper.
        if decoder
            .decode(&packet, |_| Some(&point), &mut observations)
            .is_err()
        {
            if let Some(refused) = decoder.decode_refusal(&packet, &point) {
                answered_from.learn_refusal(&refused);
            }
        }
        for observation in observations.drain(..) {
            answered_from.learn(&observation);
        }
    }
    decoder.finish(&mut observations);
    for observation in &observations {
        answered_from.learn(observation);
    }
    answered_from.settle();
    Ok(answered_from)
}

/// Gives the interfaces the file knows only by number the names `names` has for them.
fn name_interfaces(
    interfaces: &mut [CaptureInterface],
    names: &std::collections::HashMap<u32, String>,
) {
    for interface in interfaces {
        if interface.name.is_none() {
            interface.name = interface
                .ifindex
                .and_then(|ifindex| names.get(&ifindex).cloned());
        }
    }
}

/// Places one packet, feeds it to the pipeline at its own time, and counts it; returns its
/// timestamp.
fn feed(
    captured: CapturedPacket,
    placement: &mut Placement,
    pipeline: &mut Pipeline,
    counts: &mut Counts,
) -> anyhow::Result<SystemTime> {
    let ts = captured.packet.ts;
    let Some((packet, point)) = placed(captured, placement) else {
        counts.unplaced += 1;
        return Ok(ts);
    };
    let decoded = pipeline
        .ingest_placed(&packet, |_| Some(&point))
        .context("analysing the capture")?;
    counts.count(packet.seen.interface.ifindex, &point, decoded);
    pipeline.advance(ts)?;
    Ok(ts)
}

/// `captured` with the point `placement` puts it at, its direction set from it; `None` if it
/// places it nowhere.
fn placed(captured: CapturedPacket, placement: &mut Placement) -> Option<(RawPacket, Arc<Point>)> {
    let point = placement.place(&captured)?;
    let mut packet = captured.packet;
    packet.seen.direction = point.direction;
    Some((packet, point))
}

/// What became of the packets, per interface and in all.
#[derive(Default)]
struct Counts {
    /// By interface index and direction.
    points: BTreeMap<(u32, u8), PointCount>,
    dns: u64,
    not_dns: u64,
    malformed: BTreeMap<&'static str, u64>,
    in_reassembly: u64,
    unplaced: u64,
}

struct PointCount {
    ifname: String,
    direction: Direction,
    packets: u64,
    dns_packets: u64,
}

impl Counts {
    fn count(&mut self, interface: u32, point: &Point, decoded: Result<(), NotDecoded>) {
        let count = self
            .points
            .entry((interface, point.direction as u8))
            .or_insert_with(|| PointCount {
                ifname: point.ifname.to_string(),
                direction: point.direction,
                packets: 0,
                dns_packets: 0,
            });
        count.packets += 1;
        match decoded {
            Ok(()) => {
                count.dns_packets += 1;
                self.dns += 1;
            }
            Err(NotDecoded::NotDns) => self.not_dns += 1,
            Err(NotDecoded::InReassembly) => self.in_reassembly += 1,
            Err(NotDecoded::Malformed(reason)) => {
                *self.malformed.entry(reason.as_str()).or_default() += 1
            }
            Err(NotDecoded::Unplaced) => self.unplaced += 1,
        }
    }
}

/// The capture's side of the summary.
struct CaptureSummary<'a> {
    file: &'a Path,
    format: Format,
    read: u64,
    skipped: u64,
    stopped: Option<String>,
    interfaces: &'a [CaptureInterface],
    placement: &'a Placement,
}

impl CaptureSummary<'_> {
    /// The summary's source numbers: in place of the kernel's counters (which a file does not
    /// have), what the file held and how its packets were placed.
    fn extra(&self, counts: &Counts, reassembly: &ReassemblyCounts) -> SummarySource {
        let interfaces = counts
            .points
            .values()
            .map(|count| InterfaceCount {
                ifname: count.ifname.clone(),
                dir: count.direction.as_str().to_owned(),
                dns_packets: count.dns_packets,
                packets: count.packets,
            })
            .collect();
        let capture_interfaces = self
            .placement
            .describe()
            .zip(self.interfaces)
            .map(|((ifname, how, node_mac), interface)| PlacedInterface {
                ifname: ifname.to_owned(),
                linktype: interface.linktype,
                placed_by: how.to_owned(),
                node_mac,
            })
            .collect();
        SummarySource::CaptureFile(CaptureFileSummary {
            capture: CaptureFileInfo {
                file: self.file.display().to_string(),
                format: self.format.as_str().to_owned(),
                complete: self.stopped.is_none(),
                note: self.stopped.clone(),
            },
            interfaces,
            capture_interfaces,
            packets: CapturePackets {
                read: self.read,
                dns: counts.dns,
                not_dns: counts.not_dns,
                malformed: counts.malformed.values().sum::<u64>(),
                in_reassembly: counts.in_reassembly,
                unsupported_link: self.skipped,
                unplaced: counts.unplaced,
            },
            malformed: counts
                .malformed
                .iter()
                .map(|(&reason, &count)| (reason, count))
                .collect(),
            reassembly: Box::new(reassembly.into()),
        })
    }
}
