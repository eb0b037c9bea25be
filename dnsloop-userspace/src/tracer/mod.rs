//! The tracer: loads the kernel programs, attaches them to the node's links and pods as they
//! come and go, and runs the event loop that hands what they stream to the command driving it.
//! `trace`, `capture` and `probe --trace` each drive one through their own flow:
//!
//! ```text
//! let mut tracer = Tracer::start(&config).await?;           // bind, load, attach
//! let mut pipeline = tracer.pipeline(tracer.counted(sink)); // the command's sink
//! let ended = tracer.run(&mut pipeline, end).await?;       // until `end` resolves
//! tracer.finish(pipeline)?;                                // the summary, then detach
//! ```
//!
//! kernel programs -> ring buffer source -> pipeline (decoder -> analyzers -> sink); the
//! kernel's drops of DNS packets come through a ring of their own into the same pipeline.
use std::{future::Future, net::SocketAddr, path::PathBuf, pin::Pin, time::SystemTime};

use anyhow::Context as _;
use aya::{maps::MapData, maps::RingBuf, Ebpf};
use dnsloop_core::{
    analyzers::{Engine, EngineConfig},
    decode::{Coverage, Decoder},
    doctor::ConntrackStats,
    enrich::Enricher,
    observation::DropPlace,
    pipeline::Pipeline,
    points::{InterfaceRef, PointMap},
    present::names::Names,
    sink::Sink,
    source::{DroppedPacket, RawPacket, UnansweredQuery},
};
use dnsloop_shared::{drop::DropLayout, parse::DnsPorts};
use futures::{Stream, StreamExt as _};
use tokio::{
    signal::unix::{signal, SignalKind},
    time::Interval,
};

use crate::{
    kernel::{
        attach,
        clock::{monotonic_now_ns, MonotonicClock},
        counters,
        drops::{Drops, KernelDrops},
        expedited_rcu::ExpeditedRcu,
        features::{self, Lack},
        pinning::PinDir,
        programs::{self, Build, Settings},
        ringbuf::RingBufSource,
        summary,
        unanswered::UnansweredQueries,
    },
    metrics,
    node::{
        self, namespaces,
        pods::{self, CriSocket, PodNames, RuntimePods},
        topology::{self, Link, LinkEvent, LinkRole},
    },
};

mod watch;

use watch::Watch;

/// How often the kernel's query table is searched for queries past the timeout: a timeout is
/// reported at most this long after it happened.
const UNANSWERED_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
/// How often pods found before their sandbox started are looked for again, to be named.
const POD_NAMING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What a tracer watches and how it judges what it sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The kernel programs' settings.
    pub programs: Settings,
    /// The interfaces to watch; none: the whole node, its pods' loopbacks and new pods.
    pub interfaces: Vec<String>,
    /// Print every DNS packet streamed (`--packets`).
    pub print_packets: bool,
    /// Report lookups answered this long or more after they were sent (`--slow`).
    pub slow: Option<std::time::Duration>,
    /// A query with no answer after this long is a timeout.
    pub timeout: std::time::Duration,
    /// A finding still happening is reported again at most this often.
    pub report_interval: std::time::Duration,
    /// Switch the kernel to expedited RCU grace periods while attaching and detaching.
    pub expedite_attach: bool,
    /// Serve Prometheus metrics here.
    pub metrics_addr: Option<SocketAddr>,
    /// The kubelet's pod log directory, which names pods.
    pub pod_logs: PathBuf,
    /// The container runtime's CRI socket; `None`: the first that exists, if any.
    pub cri_socket: Option<CriSocket>,
    /// Keep the kernel's maps pinned here, and carry on from them.
    pub pin: Option<PathBuf>,
    /// How findings and packet lines write names (`--redact-names`).
    pub names: Names,
}

impl Default for Config {
    /// `dnsloop trace` with no option.
    fn default() -> Self {
        Self {
            programs: Settings::default(),
            interfaces: Vec::new(),
            print_packets: false,
            slow: None,
            timeout: EngineConfig::default().timeout,
            report_interval: EngineConfig::default().loop_report_interval,
            expedite_attach: false,
            metrics_addr: None,
            pod_logs: PathBuf::from(pods::POD_LOGS),
            cri_socket: None,
            pin: None,
            names: Names::AsSent,
        }
    }
}

/// The single-threaded runtime tracing runs on: the programs' maps and the netlink sockets stay
/// on one thread, in the node's namespace.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// What the command driving a tracer does with what it streams: `trace` and `probe --trace`
/// feed their pipeline (see the impl below); `trace --record` and `capture` feed one whose sink
/// also takes every packet ([`Tapped`]).
pub trait Consumer {
    /// `packets` were streamed, and `points` places them; they are taken out of the Vec.
    fn packets(&mut self, packets: &mut Vec<RawPacket>, points: &PointMap) -> anyhow::Result<()>;

    /// `queries` the kernel counted got no answer within the timeout; taken out too.
    fn unanswered(
        &mut self,
        queries: &mut Vec<UnansweredQuery>,
        points: &PointMap,
    ) -> anyhow::Result<()>;

    /// The kernel dropped `drops`, at the places `place` names; taken out too.
    fn drops(
        &mut self,
        drops: &mut Vec<DroppedPacket>,
        place: &dyn Fn(InterfaceRef) -> DropPlace,
    ) -> anyhow::Result<()>;

    /// No packet up to `now` is still to come.
    fn tick(&mut self, now: SystemTime) -> anyhow::Result<()>;
}

impl<S: Sink + ?Sized> Consumer for Pipeline<'_, S> {
    fn packets(&mut self, packets: &mut Vec<RawPacket>, points: &PointMap) -> anyhow::Result<()> {
        Ok(self.ingest(packets, points)?)
    }

    fn unanswered(
        &mut self,
        queries: &mut Vec<UnansweredQuery>,
        points: &PointMap,
    ) -> anyhow::Result<()> {
        Ok(self.ingest_unanswered(queries, points)?)
    }

    fn drops(
        &mut self,
        drops: &mut Vec<DroppedPacket>,
        place: &dyn Fn(InterfaceRef) -> DropPlace,
    ) -> anyhow::Result<()> {
        Ok(self.ingest_drops(drops, place)?)
    }

    fn tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        Ok(Pipeline::tick(self, now)?)
    }
}

/// A sink that takes more of the stream than what the pipeline writes to it: every packet
/// before the pipeline decodes it, and every tick after the pipeline's. `trace --record` keeps
/// the packets in its recorder, `capture` writes them to its bundle; the sink holds either,
/// as it hands it the findings too.
pub trait Tap: Sink {
    /// `packets`, placed by `points`, are about to go to the pipeline.
    fn before_packets(&mut self, packets: &[RawPacket], points: &PointMap) -> anyhow::Result<()>;

    /// The pipeline has ticked to `now`.
    fn after_tick(&mut self, now: SystemTime) -> anyhow::Result<()>;
}

/// A pipeline whose sink taps the stream (see [`Tap`]); all else goes to the pipeline as is.
pub struct Tapped<'s, S: Tap + 's> {
    pub pipeline: Pipeline<'s, S>,
}

impl<S: Tap> Consumer for Tapped<'_, S> {
    fn packets(&mut self, packets: &mut Vec<RawPacket>, points: &PointMap) -> anyhow::Result<()> {
        self.pipeline.sink_mut().before_packets(packets, points)?;
        Consumer::packets(&mut self.pipeline, packets, points)
    }

    fn unanswered(
        &mut self,
        queries: &mut Vec<UnansweredQuery>,
        points: &PointMap,
    ) -> anyhow::Result<()> {
        Consumer::unanswered(&mut self.pipeline, queries, points)
    }

    fn drops(
        &mut self,
        drops: &mut Vec<DroppedPacket>,
        place: &dyn Fn(InterfaceRef) -> DropPlace,
    ) -> anyhow::Result<()> {
        Consumer::drops(&mut self.pipeline, drops, place)
    }

    fn tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        Consumer::tick(&mut self.pipeline, now)?;
        self.pipeline.sink_mut().after_tick(now)
    }
}

/// The programs loaded and attached, and what they stream. Dropping it detaches them.
pub struct Tracer {
    /// What it was started with.
    config: Config,
    /// The ports the programs were loaded with, for the decoder.
    dns_ports: DnsPorts,
    // Fields drop in this order: the watch detaches before the pins and the metrics go.
    source: RingBufSource,
    /// The kernel's drops of DNS packets, `None` when not watched.
    drops: Option<Drops>,
    watch: Watch,
    link_events: Pin<Box<dyn Stream<Item = LinkEvent>>>,
    /// The kernel's queries in flight, `None` when every packet is streamed.
    unanswered: Option<UnansweredQueries>,
    /// Held until the run ends: a second dnsloop cannot count into the same maps meanwhile.
    _pins: Option<PinDir>,
    exporter: Option<metrics::Exporter>,
    /// What this kernel lacks of what dnsloop uses.
    lacks: Vec<Lack>,
    /// The node's conntrack counters when the run began; `None` where they cannot be read.
    conntrack_at_start: Option<ConntrackStats>,
}

/// The programs as loaded, with the maps the tracer reads taken out.
struct Loaded {
    ebpf: Ebpf,
    records: RingBuf<MapData>,
    clock: MonotonicClock,
    unanswered: Option<UnansweredQueries>,
    drops: Option<Drops>,
    /// The programs loaded.
    build: Build,
    /// Whether drops are watched without the kernel's drop reasons.
    drops_lack_reasons: bool,
}

impl Tracer {
    /// Sets up what `config` asks for: the metrics port and the CRI socket first, so that a
    /// mistake in either stops dnsloop before anything is loaded; then the programs, loaded,
    /// and attached to what is to be watched.
    pub async fn start(config: &Config) -> anyhow::Result<Self> {
        // Bound first: a port in use stops dnsloop before anything is loaded.
        let exporter = start_exporter(config.metrics_addr).await?;
        // A --cri-socket that is not there stops dnsloop before anything is loaded, too.
        let cri_socket = CriSocket::resolve(config.cri_socket.as_ref())?;
        let available = topology::list_links().await?;
        let bridges: Vec<Link> = available
            .iter()
            .filter(|link| link.role == LinkRole::BridgeMaster)
            .cloned()
            .collect();
        let links = attach::select(available, &config.interfaces)?;
        let pins = config.pin.as_deref().map(PinDir::open).transpose()?;
        let loaded = load(config, pins.as_ref()).await?;
        // The programs took these ports, so they fit the decoder too.
        let dns_ports = DnsPorts::from_list(&config.programs.dns_ports)?;
        // Without -i the whole node is watched, including pods that appear while we run.
        let whole_node = config.interfaces.is_empty();
        let link_events = Box::pin(topology::link_events()?);
        let pod_names = pod_names(config, cri_socket, whole_node).await;
        let mut watch = attach(config, loaded.ebpf, links, bridges, whole_node, pod_names)?;
        // Listed once its changes are followed (`link_events`), so that none is missed.
        watch.hold_addresses(topology::held_addresses(None).await?);
        let lacks = kernel_lacks(loaded.build, loaded.drops_lack_reasons, &watch);
        if let Some(said) = features::describe(&kernel_version(), &lacks) {
            eprintln!("dnsloop: {said}");
        }
        if let Some(exporter) = &exporter {
            exporter.note_lacks(&lacks);
            eprintln!("dnsloop: serving metrics at {}", exporter.url());
        }
        eprintln!("dnsloop: {}", watch.describe());
        let source =
            RingBufSource::new(loaded.records, loaded.clock).context("watching the ring buffer")?;
        Ok(Self {
            config: config.clone(),
            dns_ports,
            source,
            drops: loaded.drops,
            watch,
            link_events,
            unanswered: loaded.unanswered,
            _pins: pins,
            exporter,
            lacks,
            conntrack_at_start: node::conntrack::read(),
        })
    }

    /// `sink`, with every finding written to it counted when metrics are served: each command
    /// passes the sink that writes its output through this, whatever it wraps it in.
    pub fn counted<'s>(&self, sink: Box<dyn Sink + 's>) -> Box<dyn Sink + 's> {
        match &self.exporter {
            Some(exporter) => exporter.count_findings(sink),
            None => sink,
        }
    }

    /// The pipeline that judges what the programs stream, as configured, writing to `sink`.
    pub fn pipeline<'s, S: Sink + ?Sized + 's>(&self, sink: Box<S>) -> Pipeline<'s, S> {
        let engine = Engine::new(EngineConfig {
            timeout: self.config.timeout,
            loop_report_interval: self.config.report_interval,
            slow: self.config.slow,
            names: self.config.names.clone(),
            ..EngineConfig::default()
        });
        // Every packet of a TCP stream reaches the decoder when the kernel streams every one:
        // for the analysis, or (`--record`) for the recorder, its TCP segments completing the
        // analysis's messages.
        let programs = &self.config.programs;
        let coverage = if programs.streams_every_dns_packet() {
            Coverage::EveryPacket
        } else {
            Coverage::Sampled
        };
        // The enricher is built here, on the node's namespace thread: its conntrack socket
        // stays in that namespace.
        Pipeline::new(
            Decoder::new(self.dns_ports, coverage),
            engine,
            Enricher::new(),
            sink,
            self.config.print_packets,
        )
    }

    /// Hands what the programs stream to `consumer`, batch by batch, and follows the node's
    /// links and pods, until `until` resolves; returns what it resolved to. `until` is first
    /// polled here, with the programs attached, so it may also drive what is to be watched
    /// (`probe --trace` sends its probes from it).
    pub async fn run<T, C: Consumer + ?Sized>(
        &mut self,
        consumer: &mut C,
        until: impl Future<Output = T>,
    ) -> anyhow::Result<T> {
        let mut timers = Timers::new();
        let mut packets = Vec::new();
        let mut expired = Vec::new();
        // Whether the last sweep left expired queries in the kernel's table (see `SWEEP_MAX`).
        let mut swept_part = false;
        let mut dropped = Vec::new();
        let mut until = std::pin::pin!(until);
        let ended = loop {
            tokio::select! {
                ended = &mut until => break ended,
                batch = self.source.next_batch(&mut packets) => batch.context("reading the ring buffer")?,
                batch = next_drops(&mut self.drops, &mut dropped) => batch.context("reading the drop ring")?,
                Some(event) = self.link_events.next() => self.watch.apply(event),
                _ = timers.pod_naming.tick(), if self.watch.awaits_pod_names() => self.watch.name_new_pods(),
                _ = timers.sweep.tick(), if self.unanswered.is_some() => swept_part = self.sweep_unanswered(&mut expired),
                _ = timers.metrics_refresh.tick(), if self.exporter.is_some() => self.refresh_metrics(),
            }
            // Whatever woke the loop, the packets and drops streamed meanwhile are taken before
            // the time is told: the watermark says no record older than it is still to come,
            // which holds only if both rings were read just now (a drop, a link event or a timer
            // may have woken it while records waited for their ring's own wakeup).
            self.hand_over_rings(consumer, &mut packets, &mut dropped)?;
            self.hand_over_unanswered(consumer, &mut expired, std::mem::take(&mut swept_part))?;
            consumer.tick(self.source.watermark())?;
        };
        // What was streamed before the end is judged too, and so is every query in the
        // kernel's table that waited past the timeout by now: the last sweep may be up to an
        // interval old, and a timeout that is due is reported, not left for a next run.
        self.hand_over_rings(consumer, &mut packets, &mut dropped)?;
        let swept_part = self.sweep_unanswered(&mut expired);
        self.hand_over_unanswered(consumer, &mut expired, swept_part)?;
        Ok(ended)
    }

    /// Reads both rings to their end and hands `consumer` what they held, the drops first: a
    /// drop must be known before the query it ends is judged delivered, and packets move the
    /// analysis on as they come. (Handed after the packets, a batch spanning more than
    /// `settle`, as a busy node's does when the tracer waits for a CPU, had a query judged
    /// taken in where the drop right behind it said it was not: a false loop.)
    fn hand_over_rings<C: Consumer + ?Sized>(
        &mut self,
        consumer: &mut C,
        packets: &mut Vec<RawPacket>,
        dropped: &mut Vec<DroppedPacket>,
    ) -> anyhow::Result<()> {
        self.source.drain(packets);
        if let Some(drops) = &mut self.drops {
            drops.drain(dropped);
        }
        consumer.drops(dropped, &|device| self.watch.drop_place(device))?;
        consumer.packets(packets, self.watch.points())
    }

    /// Hands `consumer` the expired queries swept into `expired`; while the sweep left some in
    /// the kernel's table (`swept_part`), sweeps again and hands those on, one sweep's worth
    /// held at a time.
    fn hand_over_unanswered<C: Consumer + ?Sized>(
        &mut self,
        consumer: &mut C,
        expired: &mut Vec<UnansweredQuery>,
        mut swept_part: bool,
    ) -> anyhow::Result<()> {
        loop {
            consumer.unanswered(expired, self.watch.points())?;
            if !swept_part {
                return Ok(());
            }
            swept_part = self.sweep_unanswered(expired);
        }
    }

    /// Ends the run: `pipeline` writes its last findings and the summary, with what the kernel
    /// counted; then the programs are detached.
    pub fn finish<S: Sink + ?Sized>(self, pipeline: Pipeline<'_, S>) -> anyhow::Result<()> {
        let (watch, source) = (&self.watch, &self.source);
        let interfaces = counters::read_points(watch.ebpf(), watch.node_cookie(), watch.links())
            .context("reading the per-interface counters")?;
        let kernel = counters::read_global(watch.ebpf()).context("reading the kernel counters")?;
        let servers = counters::read_servers(watch.ebpf())
            .context("reading the kernel's answer statistics")?;
        let drops = self
            .drops
            .as_ref()
            .map(|drops| drops.counts(watch.ebpf()))
            .transpose()
            .context("reading the kernel's drop counters")?;
        let undecodable_records = source.undecodable_records
            + self
                .drops
                .as_ref()
                .map_or(0, |drops| drops.undecodable_records);
        let every_packet = self.config.programs.streams_every_dns_packet();
        let conntrack = self
            .conntrack_at_start
            .as_ref()
            .zip(node::conntrack::read())
            .map(|(start, end)| node::conntrack::counts_between(start, &end));
        pipeline.finish(
            source.watermark(),
            Some(servers),
            |unplaced_records, reassembly| {
                summary::summary_extra(summary::KernelNumbers {
                    interfaces: &interfaces,
                    kernel: &kernel,
                    drops: drops.as_deref(),
                    undecodable_records,
                    unplaced_records,
                    lacks: &self.lacks,
                    reassembly: every_packet.then_some(&reassembly),
                    conntrack,
                })
            },
        )?;
        self.detach();
        Ok(())
    }

    /// Detaches the programs; at full speed with --expedite-attach, as they were attached.
    fn detach(self) {
        if self.config.expedite_attach {
            let _expedited = ExpeditedRcu::begin();
            drop(self.watch);
        }
    }

    /// Takes the queries the kernel saw no answer to within the timeout out of its table,
    /// into `expired`, the oldest first (see `SWEEP_MAX`); returns whether it left some there.
    fn sweep_unanswered(&mut self, expired: &mut Vec<UnansweredQuery>) -> bool {
        let Some(unanswered) = &mut self.unanswered else {
            return false;
        };
        // A failed sweep loses nothing: its queries stay for the next one.
        let before = unanswered.expired_from_before;
        let left = unanswered
            .take_expired(self.config.timeout, expired)
            .unwrap_or_else(|error| {
                tracing::warn!("reading the kernel's query table: {error}");
                false
            });
        let from_before = unanswered.expired_from_before - before;
        if from_before > 0 {
            eprintln!("dnsloop: {from_before} queries pinned by an earlier run got no answer within --timeout; not reported as timeouts, as answers that came between the runs went unseen");
        }
        left
    }

    /// Reads what the kernel counted for the next scrapes.
    fn refresh_metrics(&self) {
        if let Some(exporter) = &self.exporter {
            exporter.refresh(
                self.watch.ebpf(),
                self.watch.node_cookie(),
                self.watch.links(),
                self.drops.as_ref(),
            );
        }
    }
}

/// What this kernel lacks, once `build`'s programs are attached: `drops_lack_reasons` when
/// drops are watched without reasons.
fn kernel_lacks(build: Build, drops_lack_reasons: bool, watch: &Watch) -> Vec<Lack> {
    [
        (!namespaces::cookies_exist()).then_some(Lack::NetnsCookie),
        (build == Build::Before517).then_some(Lack::BpfLoop),
        drops_lack_reasons.then_some(Lack::DropReasons),
        watch.on_clsact().then_some(Lack::Tcx),
        (!programs::tc_knows_netns_cookie()).then_some(Lack::TcNetnsCookie),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The running kernel's version, as dnsloop compares them.
fn kernel_version() -> String {
    aya::util::KernelVersion::current()
        .map_or_else(|_| "unknown".to_owned(), |version| version.to_string())
}

/// Waits for the next drops, if drops are watched; else forever.
async fn next_drops(
    drops: &mut Option<Drops>,
    out: &mut Vec<DroppedPacket>,
) -> std::io::Result<()> {
    match drops {
        Some(drops) => drops.next_batch(out).await,
        None => std::future::pending().await,
    }
}

/// Serves metrics at `address`, if given.
async fn start_exporter(address: Option<SocketAddr>) -> anyhow::Result<Option<metrics::Exporter>> {
    Ok(match address {
        Some(address) => Some(metrics::Exporter::start(address).await?),
        None => None,
    })
}

/// Loads the programs, carrying on from the maps in `pins` if it holds some, tells them the
/// node's addresses, and takes out the maps the tracer reads.
async fn load(config: &Config, pins: Option<&PinDir>) -> anyhow::Result<Loaded> {
    let reused = pins.is_some_and(PinDir::holds_maps);
    let run_started_ns = monotonic_now_ns();
    let build = config.programs.build();
    let (kernel_drops, undiscovered) = match config
        .programs
        .watch_drops
        .then(|| KernelDrops::discover(build))
    {
        Some(Ok(drops)) => (Some(drops), None),
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    let drops_lack_reasons = kernel_drops
        .as_ref()
        .is_some_and(|drops| !drops.gives_reasons());
    let layout = kernel_drops
        .as_ref()
        .map_or(DropLayout::NONE, KernelDrops::layout);
    let mut ebpf = programs::load(&config.programs, pins, &layout)?;
    // Said once the programs loaded: a kernel that cannot load them at all (no BTF, say) is
    // refused with that reason alone.
    if let Some(error) = undiscovered {
        eprintln!("dnsloop: not watching the kernel's drops of DNS packets: {error}");
    }
    if let Some(pins) = pins {
        let how = if reused {
            "continuing from the counters and queries in flight pinned in"
        } else {
            "pinning the counters and queries in flight in"
        };
        eprintln!("dnsloop: {how} {}", pins.path().display());
    }
    let records = programs::take_records(&mut ebpf)?;
    let clock = MonotonicClock::anchored_now();
    // With every packet streamed the analyzers have every query already.
    let unanswered = (!config.programs.stream_every_packet)
        .then(|| programs::take_queries(&mut ebpf))
        .transpose()?
        .map(|queries| UnansweredQueries::new(queries, clock, run_started_ns));
    let node_addresses = topology::addresses(None).await?;
    programs::register_forwarders(&mut ebpf, &node_addresses)?;
    let drops = match kernel_drops.map(|kernel_drops| kernel_drops.attach(&mut ebpf, clock)) {
        Some(Ok(drops)) => Some(drops),
        Some(Err(error)) => {
            let error = anyhow::Error::new(error);
            eprintln!("dnsloop: not watching the kernel's drops of DNS packets: {error:#}");
            None
        }
        None => None,
    };
    Ok(Loaded {
        ebpf,
        records,
        clock,
        unanswered,
        drops,
        build,
        drops_lack_reasons,
    })
}

/// What names the pods behind the node's veths: their log directories, and the container
/// runtime at `cri_socket`. Only the whole node has pods found behind its veths, so only then
/// is the runtime asked.
async fn pod_names(config: &Config, cri_socket: Option<PathBuf>, whole_node: bool) -> PodNames {
    let runtime = match cri_socket.filter(|_| whole_node) {
        Some(socket) => {
            eprintln!(
                "dnsloop: naming pods after the container runtime at {}",
                socket.display()
            );
            Some(RuntimePods::start(socket).await)
        }
        None => None,
    };
    PodNames::new(config.pod_logs.clone(), runtime)
}

/// Attaches the programs to `links`, and with `whole_node` to the loopback of every pod behind
/// them; with --expedite-attach at full speed.
fn attach(
    config: &Config,
    ebpf: Ebpf,
    links: Vec<Link>,
    bridges: Vec<Link>,
    whole_node: bool,
    pod_names: PodNames,
) -> anyhow::Result<Watch> {
    let _expedited = config.expedite_attach.then(ExpeditedRcu::begin).flatten();
    Watch::start(
        ebpf,
        links,
        bridges,
        whole_node,
        pod_names,
        config.programs.xdp_ingress,
    )
}

/// The event loop's periodic work. A tick missed while a batch was handled is not caught up
/// on: each one does all there is to do.
struct Timers {
    /// Queries past the timeout are looked for in the kernel's table.
    sweep: Interval,
    /// Pods found before their sandbox started are looked for again, to be named.
    pod_naming: Interval,
    /// The kernel's counters are read for the metrics' scrapes.
    metrics_refresh: Interval,
}

impl Timers {
    fn new() -> Self {
        let every = |period| {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval
        };
        Self {
            sweep: every(UNANSWERED_SWEEP_INTERVAL),
            pod_naming: every(POD_NAMING_INTERVAL),
            metrics_refresh: every(metrics::REFRESH_INTERVAL),
        }
    }
}

/// Resolves when `duration` has elapsed or on SIGINT/SIGTERM, whichever comes first.
pub fn end_of_run(
    duration: Option<std::time::Duration>,
) -> anyhow::Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> {
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(Box::pin(async move {
        let elapsed = async {
            match duration {
                Some(duration) => tokio::time::sleep(duration).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = elapsed => {}
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }))
}
