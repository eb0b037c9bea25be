//! The tracer: loads the kernel programs, attaches them to the node's links and pods as they
//! come and go, and runs the event loop that feeds what they stream through the pipeline.
//! `trace`, `capture` and `probe --trace` drive it, each with its own sink and end.
//!
//! kernel programs -> ring buffer source -> pipeline (decoder -> analyzers -> sink).
use std::{net::SocketAddr, path::PathBuf, time::SystemTime};

use anyhow::Context as _;
use dnsloop_core::{
    analyzers::{Engine, EngineConfig},
    decode::Decoder,
    enrich::Enricher,
    pipeline::Pipeline,
    points::PointMap,
    sink::Sink,
    source::RawPacket,
};
use futures::StreamExt as _;
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    kernel::{
        attach,
        clock::{monotonic_now_ns, MonotonicClock},
        counters,
        expedited_rcu::ExpeditedRcu,
        pinning::PinDir,
        programs::{self, Settings},
        ringbuf::RingBufSource,
        summary,
        unanswered::UnansweredQueries,
    },
    metrics,
    node::{
        pods::{self, CriSocket, PodNames, RuntimePods},
        topology,
        watch::Watch,
    },
};

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
}

impl Default for Config {
    /// `dnsloop trace` with no option.
    fn default() -> Self {
        Self {
            programs: Settings::default(),
            interfaces: Vec::new(),
            timeout: EngineConfig::default().timeout,
            report_interval: EngineConfig::default().loop_report_interval,
            expedite_attach: false,
            metrics_addr: None,
            pod_logs: PathBuf::from(pods::POD_LOGS),
            cri_socket: None,
            pin: None,
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

/// Sees every packet the kernel streams before the pipeline does (`capture` keeps them).
pub trait PacketTap {
    /// `packets` were streamed; `points` places them.
    fn packets(&mut self, packets: &[RawPacket], points: &PointMap) -> anyhow::Result<()>;

    /// No packet up to `now` is still to come.
    fn tick(&mut self, now: SystemTime) -> anyhow::Result<()>;
}

/// Traces with `config`, writing to `sink` and showing every packet to `tap`, until `end`
/// resolves; returns what `end` resolved to. `end` is first polled once the programs are
/// attached, so it may also drive what is to be watched (`dnsloop probe --trace` sends its
/// probes from it).
pub async fn trace<T>(
    config: &Config,
    sink: Box<dyn Sink + '_>,
    mut tap: Option<&mut dyn PacketTap>,
    end: impl std::future::Future<Output = T>,
) -> anyhow::Result<T> {
    // Bound first: a port in use stops dnsloop before anything is loaded.
    let exporter = match config.metrics_addr {
        Some(address) => Some(metrics::Exporter::start(address).await?),
        None => None,
    };
    // A --cri-socket that is not there stops dnsloop before anything is loaded, too.
    let cri_socket = CriSocket::resolve(config.cri_socket.as_ref())?;
    let links = attach::select(topology::list_links().await?, &config.interfaces)?;
    // Held until the run ends: a second dnsloop cannot count into the same maps meanwhile.
    let pins = config.pin.as_deref().map(PinDir::open).transpose()?;
    let reused = pins.as_ref().is_some_and(PinDir::holds_maps);
    let run_started_ns = monotonic_now_ns();
    let mut ebpf = programs::load(&config.programs, pins.as_ref())?;
    if let Some(pins) = &pins {
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
    let mut unanswered = (!config.programs.stream_every_packet)
        .then(|| programs::take_queries(&mut ebpf))
        .transpose()?
        .map(|queries| UnansweredQueries::new(queries, clock, run_started_ns));
    let node_addresses = topology::addresses(None).await?;
    programs::register_forwarders(&mut ebpf, &node_addresses)?;
    // Without -i the whole node is watched, including pods that appear while we run.
    let whole_node = config.interfaces.is_empty();
    let mut link_events = Box::pin(topology::link_events()?);
    // Only pods found behind the node's veths are named, which -i leaves out.
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
    let pod_names = PodNames::new(config.pod_logs.clone(), runtime);
    let expedited = config.expedite_attach.then(ExpeditedRcu::begin).flatten();
    let mut watch = Watch::start(
        ebpf,
        links,
        whole_node,
        pod_names,
        config.programs.xdp_ingress,
    )?;
    drop(expedited);
    if let Some(exporter) = &exporter {
        eprintln!("dnsloop: serving metrics at {}", exporter.url());
    }
    eprintln!("dnsloop: {}", watch.describe());

    let mut source = RingBufSource::new(records, clock).context("watching the ring buffer")?;
    let engine = Engine::new(EngineConfig {
        timeout: config.timeout,
        loop_report_interval: config.report_interval,
        ..EngineConfig::default()
    });
    let sink = match &exporter {
        Some(exporter) => exporter.count_findings(sink),
        None => sink,
    };
    // The enricher is built here, on the node's namespace thread: its conntrack socket stays in
    // that namespace.
    let mut pipeline = Pipeline::new(
        Decoder::new(&config.programs.dns_ports),
        engine,
        Enricher::new(),
        sink,
        config.programs.stream_every_packet,
    );

    let mut packets = Vec::new();
    let mut expired = Vec::new();
    let mut sweep = tokio::time::interval(UNANSWERED_SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pod_naming = tokio::time::interval(POD_NAMING_INTERVAL);
    pod_naming.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut metrics_refresh = tokio::time::interval(metrics::REFRESH_INTERVAL);
    metrics_refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut end = std::pin::pin!(end);
    let ended = loop {
        tokio::select! {
            ended = &mut end => break ended,
            batch = source.next_batch(&mut packets) => batch.context("reading the ring buffer")?,
            Some(event) = link_events.next() => watch.apply(event),
            _ = pod_naming.tick(), if watch.awaits_pod_names() => watch.name_new_pods(),
            _ = sweep.tick(), if unanswered.is_some() => {
                if let Some(unanswered) = &mut unanswered {
                    // A failed sweep loses nothing: its queries stay for the next one.
                    let before = unanswered.expired_from_before;
                    if let Err(error) = unanswered.take_expired(config.timeout, &mut expired) {
                        tracing::warn!("reading the kernel's query table: {error}");
                    }
                    let from_before = unanswered.expired_from_before - before;
                    if from_before > 0 {
                        eprintln!("dnsloop: {from_before} queries pinned by an earlier run got no answer within --timeout; not reported as timeouts, as answers that came between the runs went unseen");
                    }
                }
            }
            _ = metrics_refresh.tick(), if exporter.is_some() => {
                if let Some(exporter) = &exporter {
                    exporter.refresh(&watch);
                }
            }
        }
        if let Some(tap) = tap.as_deref_mut() {
            tap.packets(&packets, &watch.points)?;
        }
        pipeline.ingest(&mut packets, &watch.points)?;
        pipeline.ingest_unanswered(&mut expired, &watch.points)?;
        pipeline.tick(source.watermark())?;
        if let Some(tap) = tap.as_deref_mut() {
            tap.tick(source.watermark())?;
        }
    };
    source.drain(&mut packets);
    if let Some(tap) = tap {
        tap.packets(&packets, &watch.points)?;
    }
    pipeline.ingest(&mut packets, &watch.points)?;

    let interfaces = counters::read_points(&watch.ebpf, watch.node_cookie, &watch.links)
        .context("reading the per-interface counters")?;
    let kernel = counters::read_global(&watch.ebpf).context("reading the kernel counters")?;
    let servers =
        counters::read_servers(&watch.ebpf).context("reading the kernel's answer statistics")?;
    pipeline.finish(source.watermark(), Some(servers), |unplaced_records| {
        summary::summary_extra(
            &interfaces,
            &kernel,
            source.undecodable_records,
            unplaced_records,
        )
    })?;
    if config.expedite_attach {
        let _expedited = ExpeditedRcu::begin();
        drop(watch);
    }
    Ok(ended)
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
