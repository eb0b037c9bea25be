//! From captured packets to written findings: decoder -> analyzers -> the node's evidence ->
//! sink. It takes packets from any source; `trace` feeds it from the kernel's ring buffer.
use std::time::SystemTime;

use anyhow::Context as _;

use crate::{
    analyze::{Engine, ServerSummary},
    decode::{Decoder, NotDecoded},
    enrich::Enricher,
    finding::Finding,
    observation::Observation,
    points::PointMap,
    sink::Sink,
    source::{unanswered::UnansweredQuery, RawPacket},
};

pub struct Pipeline<'s> {
    decoder: Decoder,
    engine: Engine,
    enricher: Enricher,
    sink: Box<dyn Sink + 's>,
    /// `--packets`: every observation is written too.
    print_packets: bool,
    observations: Vec<Observation>,
    findings: Vec<Finding>,
    /// Packets seen on an interface `points` could not place (it had just gone away).
    unplaced_records: u64,
}

impl<'s> Pipeline<'s> {
    pub fn new(
        decoder: Decoder,
        engine: Engine,
        enricher: Enricher,
        sink: Box<dyn Sink + 's>,
        print_packets: bool,
    ) -> Self {
        Self {
            decoder,
            engine,
            enricher,
            sink,
            print_packets,
            observations: Vec::new(),
            findings: Vec::new(),
            unplaced_records: 0,
        }
    }

    /// Decodes `packets` (placed by `points`), analyses them, and writes what they prove.
    pub fn ingest(
        &mut self,
        packets: &mut Vec<RawPacket>,
        points: &PointMap,
    ) -> anyhow::Result<()> {
        for packet in packets.drain(..) {
            let place = |interface, direction| points.get(interface, direction);
            match self.decoder.decode(&packet, place, &mut self.observations) {
                Err(NotDecoded::Unplaced) => self.unplaced_records += 1,
                // Packets that are not DNS, or malformed, were already counted by the kernel.
                Err(NotDecoded::NotDns | NotDecoded::Malformed(_)) | Ok(()) => {}
            }
        }
        for observation in self.observations.drain(..) {
            if self.print_packets {
                self.sink
                    .packet(&observation)
                    .context("writing to stdout")?;
            }
            self.engine.observe(&observation, &mut self.findings);
        }
        self.emit()
    }

    /// Analyses queries the kernel counted, did not stream, and saw no answer to (placed by
    /// `points`): the timeout analyzer reports them. They are not packets seen now, so
    /// `--packets` does not print them.
    pub fn ingest_unanswered(
        &mut self,
        queries: &mut Vec<UnansweredQuery>,
        points: &PointMap,
    ) -> anyhow::Result<()> {
        for query in queries.drain(..) {
            let place = |interface, direction| points.get(interface, direction);
            match self.decoder.decode_unanswered(&query, place) {
                Some(observation) => self.engine.observe(&observation, &mut self.findings),
                None => self.unplaced_records += 1,
            }
        }
        self.emit()
    }

    /// Time has reached `now`: writes what waited for it (deadlines, settled packets).
    pub fn tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.engine.tick(now, &mut self.findings);
        self.emit()
    }

    /// The input ended at `now`: writes the last findings and the summary, with the caller's
    /// `extra` fields (given the count of unplaced packets). The servers' answer statistics are
    /// taken from `servers` when given (the kernel counts every answer; the analyzers see only
    /// what was streamed).
    pub fn finish(
        self,
        now: SystemTime,
        servers: Option<Vec<ServerSummary>>,
        extra: impl FnOnce(u64) -> serde_json::Value,
    ) -> anyhow::Result<()> {
        let Self {
            engine,
            mut enricher,
            mut sink,
            mut findings,
            unplaced_records,
            ..
        } = self;
        let mut summary = engine.finish(now, &mut findings);
        if let Some(servers) = servers {
            summary.servers = servers;
        }
        emit(&mut findings, &mut enricher, sink.as_mut())?;
        sink.summary(&summary, &extra(unplaced_records))
            .context("writing to stdout")
    }

    fn emit(&mut self) -> anyhow::Result<()> {
        emit(&mut self.findings, &mut self.enricher, self.sink.as_mut())
    }
}

/// Adds the node's evidence to each finding and writes it out.
fn emit(
    findings: &mut Vec<Finding>,
    enricher: &mut Enricher,
    sink: &mut dyn Sink,
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
