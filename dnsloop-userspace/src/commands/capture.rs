//! `dnsloop capture`: trace with every packet streamed, then leave a bundle behind for whoever
//! looks into the fault later, here or elsewhere (see `dnsloop_core::bundle`: the packets as
//! pcapng, and the findings and the node's DNS configuration as JSON and Markdown).
//!
//! Findings are printed on stdout as `trace` prints them while the capture runs. Ctrl-C ends the
//! capture early and still writes the bundle of what was captured.
use std::{
    io::{self, IsTerminal as _},
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use dnsloop_shared::parse::DnsPorts;

use clap::Args;
use dnsloop_core::sink::OutputFormat;
use dnsloop_core::{
    analyzers::{EngineConfig, Summary},
    bundle::{
        self,
        pcapng::{InterfaceRecord, PcapngOptions},
        About, Bundle, NodeConfig,
    },
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
    observation::Observation,
    points::PointMap,
    schema::SummarySource,
    sink::{self, Sink},
    source::RawPacket,
};

use crate::tracer::{self, Tap, Tapped, Tracer};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    dnsloop capture --duration 30s --out /var/tmp/dns-$(date +%s)\n  \
    dnsloop capture -i cni0 -i eth0 --duration 2m --out bundle --max-bytes 50000000\n\n\
    Then, anywhere: tshark -r bundle/capture.pcapng, or dnsloop analyze bundle/capture.pcapng.")]
pub struct CaptureArgs {
    /// Interface to watch (repeatable). Default: the whole node, as `trace` watches it.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interfaces: Vec<String>,

    /// How long to capture (e.g. 30s, 5m). SIGINT or SIGTERM ends it sooner, and the bundle of
    /// what was captured is still written.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub duration: Duration,

    /// Directory to write the bundle into (created if needed; an existing bundle there is
    /// never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Most bytes the packet file may take; past it, packets are counted, not written, and the
    /// reports say so.
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_bytes: u64,

    /// Bytes of each packet to keep, from the start of the frame (64-2048).
    #[arg(long, value_name = "BYTES", default_value_t = dnsloop_shared::record::PACKET_SNAP_MAX)]
    pub snap_len: usize,

    /// Output format of the findings printed while capturing.
    #[arg(long, value_parser = super::output_format(), default_value = "text")]
    pub output: OutputFormat,

    /// As for `trace`: attach at full speed on a node with many pods, so that the capture
    /// starts sooner.
    #[arg(long)]
    pub expedite_attach: bool,

    /// Directory holding the node's root, for the reports' view of its DNS configuration
    /// (resolv.conf and doctor's checks), as `doctor --root` reads it: in a pod, where the
    /// container's own /etc is not the node's, mount the node's / and give its mount point.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// With --redact-names, the bundle holds the reports alone: no capture.pcapng.
    #[command(flatten)]
    pub redact: super::redact::RedactArgs,
}

pub fn run(args: CaptureArgs) -> anyhow::Result<()> {
    let names = args.redact.names()?;
    bundle::prepare_dir(&args.out).context("choose another --out")?;
    let tracer_config = tracer::Config {
        names: names.clone(),
        ..tracer_config(&args)
    };
    let config = EngineConfig {
        timeout: tracer_config.timeout,
        ..EngineConfig::default()
    };
    let mut bundle = Bundle::create(
        &args.out,
        PcapngOptions {
            hold: PcapngOptions::hold_for(&config),
            max_bytes: args.max_bytes,
            dns_ports: DnsPorts::from_list(&tracer_config.programs.dns_ports)?,
        },
        &names,
    )?;
    let started = SystemTime::now();
    let node = sink::NodeName::from_environment();
    let progress = io::stderr().is_terminal().then(Progress::new);
    let shows_progress = progress.is_some();
    tracer::runtime()?.block_on(async {
        let end = tracer::end_of_run(Some(args.duration))?;
        let mut tracer = Tracer::start(&tracer_config).await?;
        let sink = BundleSink {
            out: tracer.counted(sink::for_format(
                args.output,
                &node,
                &names,
                io::stdout().lock(),
            )),
            node: &node,
            bundle: &mut bundle,
            progress,
        };
        let mut capturing = Tapped {
            pipeline: tracer.pipeline(Box::new(sink)),
        };
        tracer.run(&mut capturing, end).await?;
        tracer.finish(capturing.pipeline)?;
        if shows_progress {
            Progress::clear();
        }
        anyhow::Ok(())
    })?;
    let written = bundle.finish(About {
        started,
        duration_limit: args.duration,
        max_bytes: args.max_bytes,
        node: &NodeConfig::read(&args.root),
        recorded: None,
    })?;
    eprintln!(
        "dnsloop: bundle written to {}: {written}",
        args.out.display()
    );
    Ok(())
}

/// The trace behind a capture: every packet streamed (the analyzers see them all), with the
/// capture's interfaces and snap length.
fn tracer_config(args: &CaptureArgs) -> tracer::Config {
    let mut config = tracer::Config {
        interfaces: args.interfaces.clone(),
        expedite_attach: args.expedite_attach,
        ..tracer::Config::default()
    };
    config.programs.stream_every_packet = true;
    config.programs.snap_len = args.snap_len;
    config
}

/// The capture while it runs: passes findings on to the terminal (or log shipper), and keeps
/// them for the bundle, in its reports and as comments on their packets; every packet goes to
/// the bundle's packet file before the pipeline, and on a terminal the progress line is redrawn
/// after each tick. The bundle is reached through this sink, its one holder while the capture
/// runs.
struct BundleSink<'a> {
    out: Box<dyn Sink + 'a>,
    node: &'a sink::NodeName,
    bundle: &'a mut Bundle,
    progress: Option<Progress>,
}

impl Tap for BundleSink<'_> {
    fn before_packets(&mut self, packets: &[RawPacket], points: &PointMap) -> anyhow::Result<()> {
        for packet in packets {
            let interface = points
                .link(packet.seen.interface)
                .map(|(name, description)| InterfaceRecord { name, description });
            self.bundle.packet(packet.clone(), interface)?;
        }
        Ok(())
    }

    fn after_tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.bundle.advance(now)?;
        if let Some(progress) = &mut self.progress {
            progress.show(self.bundle.packets(), self.bundle.findings());
        }
        Ok(())
    }
}

impl Sink for BundleSink<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.bundle.finding(finding, self.node.as_str())?;
        self.out.finding(finding)
    }

    /// Every packet is streamed for the file, not for the terminal.
    fn packet(&mut self, _obs: &Observation) -> io::Result<()> {
        Ok(())
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        self.out.malformed(sample)
    }

    /// A capture records no bundle of its own: it is one.
    fn bundle(&mut self, notice: &BundleNotice) -> io::Result<()> {
        self.out.bundle(notice)
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()> {
        self.bundle.summary(summary, source, self.node.as_str())?;
        self.out.summary(summary, source)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A progress line on a terminal's stderr, redrawn at most once a second.
struct Progress {
    started: Instant,
    shown: Option<Instant>,
}

impl Progress {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            shown: None,
        }
    }

    fn show(&mut self, packets: u64, findings: u64) {
        if self
            .shown
            .is_some_and(|shown| shown.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.shown = Some(Instant::now());
        eprint!(
            "\r\x1b[Kcapturing: {}s, {packets} packets, {findings} findings",
            self.started.elapsed().as_secs()
        );
    }

    /// Clears the line, once the capture is over.
    fn clear() {
        eprint!("\r\x1b[K");
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn capture_args(out: &Path) -> CaptureArgs {
        CaptureArgs {
            interfaces: vec!["cni0".into()],
            duration: Duration::from_secs(5),
            out: out.to_path_buf(),
            max_bytes: 1 << 20,
            snap_len: 512,
            output: OutputFormat::Json,
            expedite_attach: true,
            root: PathBuf::from("/"),
            redact: crate::commands::redact::RedactArgs {
                redact_names: None,
                cluster_domain: "cluster.local".into(),
            },
        }
    }

    #[test]
    fn the_trace_behind_a_capture_streams_every_packet_of_its_interfaces() {
        let config = tracer_config(&capture_args(Path::new("/tmp/unused")));
        assert!(config.programs.stream_every_packet);
        assert!(!config.print_packets, "the packets go to the file");
        assert!(config.expedite_attach);
        assert_eq!(config.interfaces, ["cni0"]);
        assert_eq!(config.programs.snap_len, 512);
    }
}
