//! `dnsloop capture`: trace with every packet streamed, then leave a bundle behind for whoever
//! looks into the fault later, here or elsewhere:
//!
//! - `capture.pcapng`: the packets as the kernel programs saw them, one interface block per
//!   interface (named, and described so that `dnsloop analyze` places them as live), direction
//!   flags, and a comment on each packet that belongs to a finding;
//! - `report.json` (`schema::CaptureReport`): the findings and summary (the records `trace
//!   --output json` prints), the interfaces, versions, and the node's DNS configuration at
//!   capture time (resolv.conf, sysctls, and `dnsloop doctor`'s checks of it);
//! - `report.md`: the same for a person.
//!
//! Findings are printed on stdout as `trace` prints them while the capture runs. Ctrl-C ends the
//! capture early and still writes the bundle of what was captured.
use std::{
    fs::{self, File},
    io::{self, BufWriter, IsTerminal as _},
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use dnsloop_ebpf::parse::DnsPorts;

use clap::Args;
use dnsloop_core::sink::OutputFormat;
use dnsloop_core::{
    analyzers::{EngineConfig, Summary},
    decode::MalformedSample,
    doctor,
    finding::Finding,
    observation::{DropPlace, Observation},
    pipeline::Pipeline,
    points::PointMap,
    schema::{
        CaptureReport, CapturedInterface, DoctorRecord, NodeDnsConfig, PcapngFile, Record,
        ResolvConf, SummaryRecord, SummarySource,
    },
    sink::{
        self,
        pcapng::{InterfaceRecord, PcapngOptions, PcapngReport, PcapngSink},
        Sink, TextSink,
    },
    source::{DroppedPacket, InterfaceRef, RawPacket, UnansweredQuery},
};

use crate::tracer::{self, Consumer, Tracer};

const PCAPNG_FILE: &str = "capture.pcapng";
const JSON_REPORT: &str = "report.json";
const MARKDOWN_REPORT: &str = "report.md";

/// The sysctls that decide how DNS crosses a node, recorded as they were.
const SYSCTLS: [&str; 6] = [
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_count",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_udp_timeout",
    "net/ipv4/ip_forward",
];

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
    #[arg(long, value_name = "BYTES", default_value_t = dnsloop_ebpf::record::PACKET_SNAP_MAX)]
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
}

pub fn run(args: CaptureArgs) -> anyhow::Result<()> {
    let dir = prepare_dir(&args.out)?;
    let tracer_config = tracer_config(&args);
    let pcapng_path = dir.join(PCAPNG_FILE);
    let file = File::create(&pcapng_path)
        .with_context(|| format!("creating {}", pcapng_path.display()))?;
    let config = EngineConfig {
        timeout: tracer_config.timeout,
        ..EngineConfig::default()
    };
    let pcapng = PcapngSink::new(
        BufWriter::new(file),
        PcapngOptions {
            hold: PcapngOptions::hold_for(&config),
            max_bytes: args.max_bytes,
            dns_ports: DnsPorts::from_list(&tracer_config.programs.dns_ports)?,
        },
    )
    .with_context(|| format!("starting {}", pcapng_path.display()))?;
    let started = SystemTime::now();
    let mut bundle = Bundle::new(pcapng);
    let node = sink::NodeName::from_environment();
    let progress = io::stderr().is_terminal().then(Progress::new);
    tracer::runtime()?.block_on(async {
        let end = tracer::end_of_run(Some(args.duration))?;
        let mut tracer = Tracer::start(&tracer_config).await?;
        let sink = BundleSink {
            out: tracer.counted(sink::for_format(args.output, &node, io::stdout().lock())),
            node: &node,
            bundle: &mut bundle,
        };
        let mut recording = Recording {
            pipeline: tracer.pipeline(Box::new(sink)),
            progress,
        };
        tracer.run(&mut recording, end).await?;
        tracer.finish(recording.pipeline)?;
        if let Some(progress) = &recording.progress {
            progress.clear();
        }
        anyhow::Ok(())
    })?;
    let written = bundle.write(&dir, &args, started)?;
    eprintln!("dnsloop: bundle written to {}: {written}", dir.display());
    Ok(())
}

/// Creates `dir` if needed; refuses one that already holds a bundle, which would be lost.
fn prepare_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| {
        format!(
            "creating {}: choose a writable directory with --out",
            dir.display()
        )
    })?;
    for name in [PCAPNG_FILE, JSON_REPORT, MARKDOWN_REPORT] {
        let path = dir.join(name);
        if path.exists() {
            anyhow::bail!(
                "{} already exists: dnsloop does not overwrite a bundle; choose another --out \
                 or move it away",
                path.display()
            );
        }
    }
    Ok(dir.to_path_buf())
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

/// What the capture gathers while it runs.
struct Bundle {
    pcapng: PcapngSink<BufWriter<File>>,
    /// The findings as `trace --output json` prints them.
    findings_json: Vec<Record>,
    /// The summary, likewise.
    summary_json: Option<SummaryRecord>,
    /// The same, as `trace` prints them for a person.
    text: Vec<u8>,
    findings: u64,
    packets: u64,
    /// The interfaces packets were seen on, as recorded in the pcapng file.
    interfaces: Vec<(String, String)>,
    /// Packets on an interface no longer known (it went away meanwhile): not in the file.
    unplaced: u64,
}

impl Bundle {
    fn new(pcapng: PcapngSink<BufWriter<File>>) -> Self {
        Self {
            pcapng,
            findings_json: Vec::new(),
            summary_json: None,
            text: Vec::new(),
            findings: 0,
            packets: 0,
            interfaces: Vec::new(),
            unplaced: 0,
        }
    }

    /// Puts every packet of `packets` in the pcapng file, with its interface, which `points`
    /// names.
    fn record(&mut self, packets: &[RawPacket], points: &PointMap) -> anyhow::Result<()> {
        for packet in packets {
            let Some((name, description)) = points.link(packet.seen.interface) else {
                self.unplaced += 1;
                continue;
            };
            let recorded = (name.to_string(), description.to_string());
            if !self.interfaces.contains(&recorded) {
                self.interfaces.push(recorded);
            }
            self.packets += 1;
            self.pcapng
                .packet(packet.clone(), InterfaceRecord { name, description })
                .context("writing the capture file")?;
        }
        Ok(())
    }

    /// Writes the packets that have waited long enough for the findings that name them.
    fn advance(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.pcapng.advance(now).context("writing the capture file")
    }

    /// Finishes the pcapng file and writes the reports; returns what was written, in words.
    fn write(self, dir: &Path, args: &CaptureArgs, started: SystemTime) -> anyhow::Result<String> {
        let report = self
            .pcapng
            .finish()
            .with_context(|| format!("writing {}", dir.join(PCAPNG_FILE).display()))?;
        let note = report.note(args.max_bytes);
        let node = NodeConfig::read(&args.root);
        let report_json = CaptureReport {
            dnsloop: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: node.kernel.clone(),
            hostname: node.hostname.clone(),
            started: started.into(),
            ended: SystemTime::now().into(),
            duration_limit_s: args.duration.as_secs_f64(),
            pcapng: pcapng_json(&report, note.as_deref(), self.unplaced),
            interfaces: self
                .interfaces
                .iter()
                .map(|(name, description)| CapturedInterface {
                    ifname: name.clone(),
                    description: description.clone(),
                })
                .collect(),
            findings: self.findings_json,
            summary: self.summary_json,
            node: node.json(),
        };
        write_file(
            &dir.join(JSON_REPORT),
            &serde_json::to_vec_pretty(&report_json)?,
        )?;
        let markdown = markdown(
            &String::from_utf8_lossy(&self.text),
            &report,
            note.as_deref(),
            &self.interfaces,
            &node,
            started,
        );
        write_file(&dir.join(MARKDOWN_REPORT), markdown.as_bytes())?;
        let mut written = format!(
            "{PCAPNG_FILE} ({} packets, {} bytes), {JSON_REPORT}, {MARKDOWN_REPORT}",
            report.packets, report.bytes
        );
        if let Some(note) = note {
            written.push_str(&format!("; {note}"));
        }
        Ok(written)
    }
}

fn pcapng_json(report: &PcapngReport, note: Option<&str>, unplaced: u64) -> PcapngFile {
    PcapngFile {
        file: PCAPNG_FILE.to_owned(),
        packets: report.packets,
        bytes: report.bytes,
        commented: report.commented,
        left_out: report.left_out,
        unplaced,
        note: note.map(str::to_owned),
    }
}

fn write_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// The capture while it runs: every packet goes to the bundle's packet file, then to the
/// pipeline, whose findings its sink puts in the same bundle, as comments on the packets they
/// name. The bundle is reached through that sink, its one holder while the capture runs.
struct Recording<'a> {
    pipeline: Pipeline<'a, BundleSink<'a>>,
    progress: Option<Progress>,
}

impl Consumer for Recording<'_> {
    fn packets(&mut self, packets: &mut Vec<RawPacket>, points: &PointMap) -> anyhow::Result<()> {
        self.pipeline.sink_mut().bundle.record(packets, points)?;
        Ok(self.pipeline.ingest(packets, points)?)
    }

    fn unanswered(
        &mut self,
        queries: &mut Vec<UnansweredQuery>,
        points: &PointMap,
    ) -> anyhow::Result<()> {
        Ok(self.pipeline.ingest_unanswered(queries, points)?)
    }

    fn drops(
        &mut self,
        drops: &mut Vec<DroppedPacket>,
        place: &dyn Fn(InterfaceRef) -> DropPlace,
    ) -> anyhow::Result<()> {
        Ok(self.pipeline.ingest_drops(drops, place)?)
    }

    fn tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.pipeline.tick(now)?;
        let bundle = &mut *self.pipeline.sink_mut().bundle;
        bundle.advance(now)?;
        if let Some(progress) = &mut self.progress {
            progress.show(bundle.packets, bundle.findings);
        }
        Ok(())
    }
}

/// Passes findings on to the terminal (or log shipper), and keeps them for the bundle: in its
/// reports, and as comments on their packets.
struct BundleSink<'a> {
    out: Box<dyn Sink + 'a>,
    node: &'a sink::NodeName,
    bundle: &'a mut Bundle,
}

impl Sink for BundleSink<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.bundle.findings += 1;
        self.bundle.pcapng.finding(finding);
        let Bundle {
            findings_json,
            text,
            ..
        } = &mut *self.bundle;
        findings_json.push(Record::finding(finding, self.node.as_str()));
        TextSink::new(text).finding(finding)?;
        self.out.finding(finding)
    }

    /// Every packet is streamed for the file, not for the terminal.
    fn packet(&mut self, _obs: &Observation) -> io::Result<()> {
        Ok(())
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        self.out.malformed(sample)
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()> {
        let Bundle {
            summary_json, text, ..
        } = &mut *self.bundle;
        summary_json
            .get_or_insert_with(|| SummaryRecord::new(summary, source.clone(), self.node.as_str()));
        TextSink::new(text).summary(summary, source)?;
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

    fn clear(&self) {
        eprint!("\r\x1b[K");
    }
}

/// The node's DNS configuration at capture time.
struct NodeConfig {
    kernel: Option<String>,
    hostname: Option<String>,
    resolv_conf: Option<String>,
    resolv_conf_target: Option<PathBuf>,
    sysctls: Vec<(&'static str, Option<String>)>,
    /// `dnsloop doctor`'s checks of this node, as its JSON lines and as text.
    checks_json: Vec<DoctorRecord>,
    checks_text: String,
}

impl NodeConfig {
    /// Reads the node whose root is at `root`. The kernel's view (`/proc/sys`) is this
    /// process's: a capture shares the node's network namespace, whatever its root.
    fn read(root: &Path) -> Self {
        let read = |path: &str| fs::read_to_string(path).ok();
        let trimmed = |path: &str| read(path).map(|text| text.trim().to_string());
        let resolv_conf = root.join("etc/resolv.conf");
        let doctor_output = |output| {
            let config = doctor::Config {
                root: root.to_path_buf(),
                corefiles: Vec::new(),
                output,
            };
            let mut out = Vec::new();
            match doctor::doctor(&config, &mut out) {
                Ok(_) => String::from_utf8_lossy(&out).into_owned(),
                Err(error) => format!("doctor could not run: {error}\n"),
            }
        };
        Self {
            kernel: trimmed("/proc/sys/kernel/osrelease"),
            hostname: trimmed("/proc/sys/kernel/hostname"),
            resolv_conf: fs::read_to_string(&resolv_conf).ok(),
            resolv_conf_target: fs::read_link(&resolv_conf).ok(),
            sysctls: SYSCTLS
                .iter()
                .map(|name| (*name, trimmed(&format!("/proc/sys/{name}"))))
                .collect(),
            checks_json: doctor_output(OutputFormat::Json)
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect(),
            checks_text: doctor_output(OutputFormat::Text),
        }
    }

    fn json(&self) -> NodeDnsConfig {
        NodeDnsConfig {
            resolv_conf: ResolvConf {
                path: "/etc/resolv.conf".to_owned(),
                symlink_to: self
                    .resolv_conf_target
                    .as_ref()
                    .map(|target| target.display().to_string()),
                content: self.resolv_conf.clone(),
            },
            sysctls: self
                .sysctls
                .iter()
                .map(|(name, value)| (name.replace('/', "."), value.clone()))
                .collect(),
            checks: self.checks_json.clone(),
        }
    }
}

fn markdown(
    trace_text: &str,
    report: &PcapngReport,
    note: Option<&str>,
    interfaces: &[(String, String)],
    node: &NodeConfig,
    started: SystemTime,
) -> String {
    let (findings, summary) = match trace_text.find("summary:") {
        Some(at) => trace_text.split_at(at),
        None => (trace_text, ""),
    };
    let mut text = format!(
        "# dnsloop capture on {} at {}\n\n",
        node.hostname.as_deref().unwrap_or("this node"),
        sink::rfc3339(started)
    );
    text.push_str("## Findings\n\n");
    if findings.trim().is_empty() {
        text.push_str("None: no loop, no reply from an unexpected source, no timeout.\n\n");
    } else {
        text.push_str(
            "Each loop is followed by its path, one hop per line: where the question was seen, \
             and which namespace it left or entered there.\n\n",
        );
        text.push_str(&fenced(findings));
    }
    text.push_str("## Latency and answers per server, and what was counted\n\n");
    text.push_str(&fenced(summary));
    text.push_str("## Packets\n\n");
    text.push_str(&format!(
        "`{PCAPNG_FILE}`: {} packets, {} bytes, {} with a finding's comment \
         (open it with Wireshark, `tshark -r {PCAPNG_FILE}`, or `dnsloop analyze {PCAPNG_FILE}`).\n\n",
        report.packets, report.bytes, report.commented
    ));
    if let Some(note) = note {
        text.push_str(&format!("**Note:** {note}.\n\n"));
    }
    for (name, description) in interfaces {
        text.push_str(&format!("- `{name}`: `{description}`\n"));
    }
    text.push_str("\n## The node's DNS configuration\n\n");
    text.push_str(&format!(
        "Kernel {}. `/etc/resolv.conf`{}:\n\n",
        node.kernel.as_deref().unwrap_or("unknown"),
        node.resolv_conf_target
            .as_ref()
            .map(|target| format!(" (a symlink to `{}`)", target.display()))
            .unwrap_or_default()
    ));
    text.push_str(&fenced(
        node.resolv_conf.as_deref().unwrap_or("(unreadable)\n"),
    ));
    for (name, value) in &node.sysctls {
        text.push_str(&format!(
            "- `{}` = {}\n",
            name.replace('/', "."),
            value.as_deref().unwrap_or("(absent)")
        ));
    }
    text.push_str("\n`dnsloop doctor` on this node at capture time:\n\n");
    text.push_str(&fenced(&node.checks_text));
    text
}

fn fenced(body: &str) -> String {
    let body = body.trim_end();
    format!("```\n{body}\n```\n\n")
}

#[cfg(test)]
mod tests {
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
        }
    }

    #[test]
    fn the_node_is_read_below_the_root_given() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("etc")).unwrap();
        fs::write(
            root.path().join("etc/resolv.conf"),
            "nameserver 169.254.25.10\n",
        )
        .unwrap();
        let node = NodeConfig::read(root.path());
        assert_eq!(
            node.resolv_conf.as_deref(),
            Some("nameserver 169.254.25.10\n")
        );
        // doctor read the same root: it flags the node-local cache as the node's upstream.
        assert!(
            node.checks_text.contains("169.254.25.10"),
            "{}",
            node.checks_text
        );
    }

    #[test]
    fn the_trace_behind_a_capture_streams_every_packet_of_its_interfaces() {
        let config = tracer_config(&capture_args(Path::new("/tmp/unused")));
        assert!(config.programs.stream_every_packet);
        assert!(config.expedite_attach);
        assert_eq!(config.interfaces, ["cni0"]);
        assert_eq!(config.programs.snap_len, 512);
    }

    #[test]
    fn a_directory_holding_a_bundle_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("new/bundle");
        assert_eq!(
            prepare_dir(&fresh).unwrap(),
            fresh,
            "created with its parents"
        );
        fs::write(fresh.join(JSON_REPORT), "{}").unwrap();
        let error = prepare_dir(&fresh).unwrap_err().to_string();
        assert!(error.contains("does not overwrite"), "{error}");
    }

    #[test]
    fn the_markdown_report_puts_findings_first_and_says_when_there_are_none() {
        let node = NodeConfig {
            kernel: Some("6.18.0".into()),
            hostname: Some("node-1".into()),
            resolv_conf: Some("nameserver 169.254.25.10\n".into()),
            resolv_conf_target: None,
            sysctls: vec![("net/bridge/bridge-nf-call-iptables", Some("0".into()))],
            checks_json: Vec::new(),
            checks_text: "doctor: 0 errors\n".into(),
        };
        let report = PcapngReport {
            bytes: 1000,
            packets: 10,
            commented: 4,
            ..PcapngReport::default()
        };
        let interfaces = [("cni0".to_string(), "dnsloop/2 role=bridge".to_string())];
        let at = SystemTime::UNIX_EPOCH;
        let with_loop = markdown(
            "12:00:00.000  LOOP  x1  www.example.test. A: ...\n  12:00:00.000  cni0 ...\nsummary: 10 observations\n",
            &report,
            Some("the packet file reached its limit"),
            &interfaces,
            &node,
            at,
        );
        let findings = with_loop.find("## Findings").unwrap();
        let loop_line = with_loop.find("LOOP  x1").unwrap();
        let servers = with_loop.find("## Latency").unwrap();
        assert!(findings < loop_line && loop_line < servers, "{with_loop}");
        assert!(with_loop.contains("**Note:** the packet file reached its limit"));
        assert!(with_loop.contains("`net.bridge.bridge-nf-call-iptables` = 0"));
        assert!(with_loop.contains("nameserver 169.254.25.10"));

        let quiet = markdown("summary: 0 observations\n", &report, None, &[], &node, at);
        assert!(quiet.contains("None: no loop"), "{quiet}");
    }
}
