//! `dnsloop trace`: watch DNS live until the duration ends or a signal arrives.
//!
//! kernel programs -> ring buffer source -> pipeline (decoder -> analyzers -> sink on stdout).
use std::time::SystemTime;

use anyhow::Context as _;
use futures::StreamExt as _;
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    analyze::{Engine, EngineConfig},
    attach,
    cli::TraceArgs,
    counters,
    decode::Decoder,
    enrich::Enricher,
    expedited_rcu::ExpeditedRcu,
    metrics,
    pipeline::Pipeline,
    pods::{CriSocket, PodNames, RuntimePods},
    points::PointMap,
    programs::{self, pinning::PinDir},
    report,
    sink::{self, Sink},
    source::{
        clock::{monotonic_now_ns, MonotonicClock},
        ringbuf::RingBufSource,
        unanswered::UnansweredQueries,
        RawPacket,
    },
    topology,
    watch::Watch,
};

/// How often the kernel's query table is searched for queries past the timeout: a timeout is
/// reported at most this long after it happened.
const UNANSWERED_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
/// How often pods found before their sandbox started are looked for again, to be named.
const POD_NAMING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let end = end_of_run(args.duration)?;
        // Buffered: each batch is written at once (see `Sink::flush`), not line by line.
        let stdout =
            std::io::BufWriter::with_capacity(sink::STDOUT_BUFFER, std::io::stdout().lock());
        let node = sink::NodeName::from_environment();
        trace(
            &args,
            sink::for_format(args.output, &node, stdout),
            None,
            end,
        )
        .await
    })
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

/// Traces with `args`, writing to `sink` and showing every packet to `tap`, until `end`
/// resolves; returns what `end` resolved to. `end` is first polled once the programs are
/// attached, so it may also drive what is to be watched (`dnsloop probe --trace` sends its
/// probes from it).
pub async fn trace<T>(
    args: &TraceArgs,
    sink: Box<dyn Sink + '_>,
    mut tap: Option<&mut dyn PacketTap>,
    end: impl std::future::Future<Output = T>,
) -> anyhow::Result<T> {
    // Bound first: a port in use stops dnsloop before anything is loaded.
    let exporter = match args.metrics_addr {
        Some(address) => Some(metrics::Exporter::start(address).await?),
        None => None,
    };
    // A --cri-socket that is not there stops dnsloop before anything is loaded, too.
    let cri_socket = CriSocket::resolve(args.cri_socket.as_ref())?;
    let links = attach::select(topology::list_links().await?, &args.interfaces)?;
    // Held until the run ends: a second dnsloop cannot count into the same maps meanwhile.
    let pins = args.pin.as_deref().map(PinDir::open).transpose()?;
    let reused = pins.as_ref().is_some_and(PinDir::holds_maps);
    let run_started_ns = monotonic_now_ns();
    let mut ebpf = programs::load(
        &programs::Settings {
            dns_ports: args.dns_ports.clone(),
            stream_every_packet: args.packets,
            snap_len: args.snap_len,
            question_table_size: args.question_table_size,
            query_table_size: args.query_table_size,
            ring_buffer_mib: args.ring_buffer_mib,
            xdp_ingress: args.xdp,
        },
        pins.as_ref(),
    )?;
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
    let mut unanswered = (!args.packets)
        .then(|| programs::take_queries(&mut ebpf))
        .transpose()?
        .map(|queries| UnansweredQueries::new(queries, clock, run_started_ns));
    let node_addresses = topology::addresses(None).await?;
    programs::register_forwarders(&mut ebpf, &node_addresses)?;
    // Without -i the whole node is watched, including pods that appear while we run.
    let whole_node = args.interfaces.is_empty();
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
    let pod_names = PodNames::new(args.pod_logs.clone(), runtime);
    let expedited = args.expedite_attach.then(ExpeditedRcu::begin).flatten();
    let mut watch = Watch::start(ebpf, links, whole_node, pod_names, args.xdp)?;
    drop(expedited);
    if let Some(exporter) = &exporter {
        eprintln!("dnsloop: serving metrics at {}", exporter.url());
    }
    eprintln!("dnsloop: {}", watch.describe());

    let mut source = RingBufSource::new(records, clock).context("watching the ring buffer")?;
    let engine = Engine::new(EngineConfig {
        timeout: args.timeout,
        loop_report_interval: args.report_interval,
        ..EngineConfig::default()
    });
    let sink = match &exporter {
        Some(exporter) => exporter.count_findings(sink),
        None => sink,
    };
    // The enricher is built here, on the node's namespace thread: its conntrack socket stays in
    // that namespace.
    let mut pipeline = Pipeline::new(
        Decoder::new(&args.dns_ports),
        engine,
        Enricher::new(),
        sink,
        args.packets,
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
                    if let Err(error) = unanswered.take_expired(args.timeout, &mut expired) {
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
        report::summary_extra(
            &interfaces,
            &kernel,
            source.undecodable_records,
            unplaced_records,
        )
    })?;
    if args.expedite_attach {
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
