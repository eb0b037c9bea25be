//! `trace --record DIR`, the flight recorder: its options, and its part of `trace`'s flow.
//! Every packet goes to the recorder before the pipeline, so that a finding's packets are in
//! memory when it fires; the sink hands each finding to the recorder and prints the bundle it
//! went into right after it.
use std::{
    path::PathBuf,
    time::{Duration, SystemTime},
};

use clap::Args;
use dnsloop_core::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
    observation::Observation,
    points::PointMap,
    recorder::{Recorder, RecorderConfig, RecorderEvent},
    schema::SummarySource,
    sink::{NodeName, Sink},
    source::RawPacket,
};
use dnsloop_shared::parse::DnsPorts;

use crate::tracer::{self, Tap, Tapped, Tracer};

/// `--record`'s default memory: 64 MiB.
const DEFAULT_RECORD_BYTES: u64 = 64 * 1024 * 1024;
/// `--record-max-bytes`' default: 1 GiB.
const DEFAULT_RECORD_MAX_BYTES: u64 = 1024 * 1024 * 1024;

#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct RecordArgs {
    /// Keep the last seconds of DNS packets in memory and, when a finding fires, write them
    /// into a new directory under DIR: the bundle `capture` writes (capture.pcapng, report.json,
    /// report.md), from --record-before the finding to --record-after it. Its path is printed
    /// with the finding. The kernel then streams every DNS packet to be kept; only those a trace
    /// without --record would see are analysed, so the findings are the same (BENCHMARKS.md has
    /// the cost). With --redact-names, a bundle holds the reports alone, and no packet is kept.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,

    /// Memory for the packets kept, in bytes: past it the oldest are dropped. Each packet takes
    /// its captured bytes (at most --snap-len) and about 150 more: the default 64 MiB holds
    /// about 150,000 packets of 300 bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RECORD_BYTES, requires = "record")]
    pub record_bytes: u64,

    /// A bundle starts this long before its finding's first packet.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s", value_name = "DURATION", requires = "record")]
    pub record_before: Duration,

    /// A bundle ends this long after its finding, and is written then; findings meanwhile join
    /// it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s", value_name = "DURATION", requires = "record")]
    pub record_after: Duration,

    /// At most one bundle per loop (per kind for other findings) this often; findings that get
    /// none are counted in the next one's `suppressed`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m", value_name = "DURATION", requires = "record")]
    pub record_interval: Duration,

    /// Disk for all the bundles under DIR, in bytes: past it, once a bundle is written, the
    /// oldest are removed (only the `dnsloop-*` directories --record made; the newest is kept
    /// whole).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RECORD_MAX_BYTES, requires = "record")]
    pub record_max_bytes: u64,
}

impl RecordArgs {
    /// The recorder asked for, if any, started: its directory made, its writer running.
    pub fn recorder(&self, config: &tracer::Config) -> anyhow::Result<Option<Recorder>> {
        let Some(dir) = &self.record else {
            return Ok(None);
        };
        let recorder = Recorder::start(RecorderConfig {
            dir: dir.clone(),
            memory_bytes: self.record_bytes,
            before: self.record_before,
            after: self.record_after,
            interval: self.record_interval,
            disk_bytes: self.record_max_bytes,
            dns_ports: DnsPorts::from_list(&config.programs.dns_ports)?,
            node: NodeName::from_environment().as_str().to_owned(),
            // The node's view: `trace` runs in the node's root, or (in a pod) beside a copy of
            // its resolv.conf.
            root: PathBuf::from("/"),
            names: config.names.clone(),
        })?;
        if config.names.is_redacted() {
            eprintln!(
                "dnsloop: names are redacted, so bundles hold no packets: a finding's reports go \
                 in {}",
                dir.display()
            );
        } else {
            eprintln!(
                "dnsloop: recording the last {} MiB of DNS packets; a finding's bundle goes in {}",
                self.record_bytes / (1024 * 1024),
                dir.display()
            );
        }
        Ok(Some(recorder))
    }
}

/// Runs `tracer` until `end`, every packet to `recorder` and then the pipeline, whose
/// findings go to `out` with the bundles they went into.
pub async fn run<'a>(
    mut tracer: Tracer,
    out: Box<dyn Sink + 'a>,
    recorder: &'a mut Recorder,
    end: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let sink = RecordingSink { out, recorder };
    let mut recording = Tapped {
        pipeline: tracer.pipeline(Box::new(sink)),
    };
    tracer.run(&mut recording, end).await?;
    tracer.finish(recording.pipeline)
}

/// Ends the recording: the bundle recording is written with what it has, and what the
/// recorder did is told.
pub fn finish(recorder: Recorder) {
    let dir = recorder.dir().to_path_buf();
    let (counts, events) = recorder.finish();
    tell(events);
    eprintln!(
        "dnsloop: recorder: {} bundle(s) in {}; {} finding(s) joined one, {} got none (--record-interval)",
        counts.bundles,
        dir.display(),
        counts.joined,
        counts.suppressed
    );
}

/// Says on stderr what happened to bundles.
fn tell(events: Vec<RecorderEvent>) {
    for event in events {
        match event {
            RecorderEvent::Written(path, written) => {
                eprintln!("dnsloop: bundle written to {}: {written}", path.display());
            }
            RecorderEvent::Failed(path, error) => eprintln!(
                "dnsloop: bundle {} not written: {:#}",
                path.display(),
                anyhow::Error::from(error)
            ),
            RecorderEvent::NotStarted(dir, error) => eprintln!(
                "dnsloop: no bundle: making a directory under {}: {error}",
                dir.display()
            ),
            RecorderEvent::Removed(path) => eprintln!(
                "dnsloop: removed bundle {} (--record-max-bytes)",
                path.display()
            ),
            RecorderEvent::RemoveFailed(path, error) => eprintln!(
                "dnsloop: removing bundle {} (--record-max-bytes): {error}",
                path.display()
            ),
        }
    }
}

/// Writes findings to `out`, each followed by the bundle the recorder put it in, if any; and
/// keeps every packet in the recorder, whose bundles are told of as it writes them.
struct RecordingSink<'a> {
    out: Box<dyn Sink + 'a>,
    recorder: &'a mut Recorder,
}

impl Tap for RecordingSink<'_> {
    fn before_packets(&mut self, packets: &[RawPacket], points: &PointMap) -> anyhow::Result<()> {
        self.recorder.packets(packets, points);
        Ok(())
    }

    fn after_tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.recorder.tick(now);
        tell(self.recorder.events());
        Ok(())
    }
}

impl Sink for RecordingSink<'_> {
    fn finding(&mut self, finding: &Finding) -> std::io::Result<()> {
        self.out.finding(finding)?;
        match self.recorder.finding(finding) {
            Some(notice) => self.out.bundle(&notice),
            None => Ok(()),
        }
    }

    fn packet(&mut self, obs: &Observation) -> std::io::Result<()> {
        self.out.packet(obs)
    }

    fn bundle(&mut self, notice: &BundleNotice) -> std::io::Result<()> {
        self.out.bundle(notice)
    }

    fn malformed(&mut self, sample: &MalformedSample) -> std::io::Result<()> {
        self.out.malformed(sample)
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> std::io::Result<()> {
        self.out.summary(summary, source)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use dnsloop_core::recorder::PACKET_OVERHEAD;

    use crate::cli::{Cli, Command};

    fn trace(words: &[&str]) -> Result<crate::commands::trace::TraceArgs, clap::Error> {
        let cli = Cli::try_parse_from(["dnsloop", "trace"].iter().chain(words))?;
        match cli.command {
            Command::Trace(args) => Ok(args),
            other => panic!("not trace: {other:?}"),
        }
    }

    #[test]
    fn recording_streams_every_packet_to_keep_without_analysing_or_printing_them() {
        let args = trace(&["--record", "/var/lib/dnsloop/record"]).unwrap();
        let config = args.config().unwrap();
        assert!(config.programs.record_every_packet);
        assert!(!config.programs.stream_every_packet);
        assert!(!config.print_packets);
        let printing = trace(&["--record", "/tmp/r", "--packets"])
            .unwrap()
            .config()
            .unwrap();
        assert!(printing.print_packets && printing.programs.stream_every_packet);
    }

    #[test]
    fn record_options_without_record_are_refused() {
        for option in [
            &["--record-bytes", "1000"][..],
            &["--record-after", "1s"],
            &["--record-interval", "1m"],
            &["--record-max-bytes", "1000"],
            &["--record-before", "1s"],
        ] {
            let error = trace(option).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{option:?}"
            );
        }
    }

    #[test]
    fn record_bytes_help_states_the_cost_per_packet() {
        assert!(
            (140..=160).contains(&PACKET_OVERHEAD),
            "--record-bytes says about 150 bytes a packet: {PACKET_OVERHEAD}"
        );
    }
}
