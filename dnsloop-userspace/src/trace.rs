//! `dnsloop trace`: watch DNS live until the duration ends or a signal arrives.
//!
//! kernel programs -> ring buffer source -> decoder -> analyzers -> sink (stdout).
use anyhow::Context as _;
use futures::StreamExt as _;
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    analyze::{Engine, EngineConfig},
    attach,
    cli::TraceArgs,
    counters,
    decode::{Decoder, NotDecoded},
    enrich::Enricher,
    finding::Finding,
    observation::Observation,
    points::PointMap,
    programs, sink,
    source::{clock::MonotonicClock, ringbuf::RingBufSource, RawPacket},
    topology,
    watch::Watch,
};

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(trace(args))
}

async fn trace(args: TraceArgs) -> anyhow::Result<()> {
    let links = attach::select(topology::list_links().await?, &args.interfaces)?;
    let mut ebpf = programs::load(&programs::Settings {
        dns_ports: args.dns_ports.clone(),
        stream_every_packet: args.packets,
        snap_len: args.snap_len,
        question_table_size: args.question_table_size,
        query_table_size: args.query_table_size,
        ring_buffer_mib: args.ring_buffer_mib,
    })?;
    let records = programs::take_records(&mut ebpf)?;
    // Without -i the whole node is watched, including pods that appear while we run.
    let whole_node = args.interfaces.is_empty();
    let mut link_events = Box::pin(topology::link_events()?);
    let mut watch = Watch::start(ebpf, links, whole_node)?;
    eprintln!("dnsloop: {}", watch.describe());

    let mut source = RingBufSource::new(records, MonotonicClock::anchored_now())
        .context("watching the ring buffer")?;
    let decoder = Decoder::new(&args.dns_ports);
    let mut engine = Engine::new(EngineConfig {
        timeout: args.timeout,
        loop_report_interval: args.report_interval,
        ..EngineConfig::default()
    });
    let stdout = std::io::stdout();
    let mut sink = sink::for_format(args.output, stdout.lock());
    let mut packets = Vec::new();
    let mut observations = Vec::new();
    let mut findings = Vec::new();
    let mut unplaced_records = 0u64;
    // Built here, on the node's namespace thread: its conntrack socket stays in that namespace.
    let mut enricher = Enricher::new();
    let mut decode =
        |points: &PointMap, packets: &mut Vec<RawPacket>, observations: &mut Vec<Observation>| {
            for packet in packets.drain(..) {
                match decoder.decode(
                    &packet,
                    |interface, direction| points.get(interface, direction),
                    observations,
                ) {
                    Err(NotDecoded::Unplaced) => unplaced_records += 1,
                    // Packets that are not DNS, or malformed, were already counted by the kernel.
                    Err(NotDecoded::NotDns | NotDecoded::Malformed(_)) | Ok(()) => {}
                }
            }
        };

    let mut end = end_of_run(args.duration)?;
    loop {
        tokio::select! {
            _ = &mut end => break,
            batch = source.next_batch(&mut packets) => batch.context("reading the ring buffer")?,
            Some(event) = link_events.next() => watch.apply(event),
        }
        decode(&watch.points, &mut packets, &mut observations);
        feed(
            &mut engine,
            &mut observations,
            &mut findings,
            args.packets,
            sink.as_mut(),
        )?;
        engine.tick(source.watermark(), &mut findings);
        emit(&mut findings, &mut enricher, sink.as_mut())?;
    }
    source.drain(&mut packets);
    decode(&watch.points, &mut packets, &mut observations);
    feed(
        &mut engine,
        &mut observations,
        &mut findings,
        args.packets,
        sink.as_mut(),
    )?;
    let summary = engine.finish(source.watermark(), &mut findings);
    emit(&mut findings, &mut enricher, sink.as_mut())?;

    let interfaces = counters::read_points(&watch.ebpf, watch.node_cookie, &watch.links)
        .context("reading the per-interface counters")?;
    let global = counters::read_global(&watch.ebpf).context("reading the kernel counters")?;
    let extra = crate::report::summary_extra(
        &interfaces,
        &global,
        source.undecodable_records,
        unplaced_records,
    );
    sink.summary(&summary, &extra)
        .context("writing to stdout")?;
    Ok(())
}

/// Hands decoded observations to the engine (and the sink, with `--packets`); findings wait in
/// `findings` for `emit`.
fn feed(
    engine: &mut Engine,
    observations: &mut Vec<Observation>,
    findings: &mut Vec<Finding>,
    print_packets: bool,
    sink: &mut dyn sink::Sink,
) -> anyhow::Result<()> {
    for observation in observations.drain(..) {
        if print_packets {
            sink.packet(&observation).context("writing to stdout")?;
        }
        engine.observe(&observation, findings);
    }
    Ok(())
}

/// Adds the node's evidence to each finding and writes it out.
fn emit(
    findings: &mut Vec<Finding>,
    enricher: &mut Enricher,
    sink: &mut dyn sink::Sink,
) -> anyhow::Result<()> {
    for mut finding in findings.drain(..) {
        match &mut finding {
            Finding::UnexpectedSource(unexpected) => enricher.enrich(unexpected),
            Finding::Loop(found) => enricher.enrich_loop(found),
            Finding::Timeout(_) => {}
        }
        sink.finding(&finding).context("writing to stdout")?;
    }
    Ok(())
}

/// Resolves when `duration` has elapsed or on SIGINT/SIGTERM, whichever comes first.
fn end_of_run(
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
