//! From captured packets to written findings: decoder -> analyzers -> the node's evidence ->
//! sink. It takes packets from any source; `trace` feeds it from the kernel's ring buffer,
//! `analyze` from a capture file, whose packets were seen on another node, or long ago: there
//! the node's evidence is not looked for.
use std::time::SystemTime;

use anyhow::Context as _;

use crate::{
    analyze::Engine,
    decode::{Decoder, NotDecoded},
    enrich::Enricher,
    finding::Finding,
    observation::{Observation, Point},
    points::PointMap,
    sink::Sink,
    source::RawPacket,
};

pub struct Pipeline<'s> {
    decoder: Decoder,
    engine: Engine,
    /// `None`: the packets were not seen here and now, so this node's conntrack table and
    /// bridge settings say nothing about them.
    enricher: Option<Enricher>,
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
            enricher: Some(enricher),
            sink,
            print_packets,
            observations: Vec::new(),
            findings: Vec::new(),
            unplaced_records: 0,
        }
    }

    /// A pipeline for packets captured elsewhere or earlier: its findings get no evidence
    /// from the machine it runs on.
    pub fn without_enrichment(
        decoder: Decoder,
        engine: Engine,
        sink: Box<dyn Sink + 's>,
        print_packets: bool,
    ) -> Self {
        Self {
            enricher: None,
            ..Self::new(decoder, engine, Enricher::default(), sink, print_packets)
        }
    }

    /// Decodes `packet`, which its source placed at `point` itself (see
    /// `source::capture_file::placement`), analyses it, and writes what it proves. Returns why
    /// it yielded no observation, if it did not.
    pub fn ingest_placed(
        &mut self,
        packet: &RawPacket,
        point: &Point,
    ) -> anyhow::Result<Result<(), NotDecoded>> {
        let decoded = self
            .decoder
            .decode(packet, |_, _| Some(point), &mut self.observations);
        self.analyze()?;
        Ok(decoded)
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
        self.analyze()
    }

    /// Analyses the decoded observations and writes what they prove.
    fn analyze(&mut self) -> anyhow::Result<()> {
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

    /// Time has reached `now`: writes what waited for it (deadlines, settled packets).
    pub fn tick(&mut self, now: SystemTime) -> anyhow::Result<()> {
        self.engine.tick(now, &mut self.findings);
        self.emit()
    }

    /// The input ended at `now`: writes the last findings and the summary, with the caller's
    /// `extra` fields (given the count of unplaced packets).
    pub fn finish(
        self,
        now: SystemTime,
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
        let summary = engine.finish(now, &mut findings);
        emit(&mut findings, enricher.as_mut(), sink.as_mut())?;
        sink.summary(&summary, &extra(unplaced_records))
            .context("writing to stdout")
    }

    fn emit(&mut self) -> anyhow::Result<()> {
        emit(
            &mut self.findings,
            self.enricher.as_mut(),
            self.sink.as_mut(),
        )
    }
}

/// Adds the node's evidence, if it is to be had, to each finding and writes it out.
fn emit(
    findings: &mut Vec<Finding>,
    mut enricher: Option<&mut Enricher>,
    sink: &mut dyn Sink,
) -> anyhow::Result<()> {
    for mut finding in findings.drain(..) {
        match (&mut finding, enricher.as_deref_mut()) {
            (Finding::UnexpectedSource(unexpected), Some(enricher)) => enricher.enrich(unexpected),
            (Finding::Loop(found), Some(enricher)) => enricher.enrich_loop(found),
            _ => {}
        }
        sink.finding(&finding).context("writing to stdout")?;
    }
    Ok(())
}
