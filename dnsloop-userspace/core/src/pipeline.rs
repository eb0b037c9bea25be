//! From captured packets to written findings: decoder -> analyzers -> the node's evidence ->
//! sink. It takes packets from any source; `trace` feeds it from the kernel's ring buffer,
//! `analyze` from a capture file, whose packets were seen on another node, or long ago: there
//! the node's evidence is not looked for.
use std::{
    collections::HashMap,
    marker::PhantomData,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::Malformed;
use thiserror::Error;

use crate::{
    analyzers::{
        packet::MessageKey,
        table::{FastHash, Table},
        Engine, ServerSummary,
    },
    answered_from::AnsweredFrom,
    decode::{completes_for_analysis, Decoder, NotDecoded, ReassemblyCounts},
    enrich::Enricher,
    finding::Finding,
    observation::{DropPlace, DroppedMessage, Observation, Point},
    points::{InterfaceRef, PointMap, Seen},
    schema::SummarySource,
    sink::Sink,
    source::{DroppedPacket, RawPacket, UnansweredQuery},
};

/// What stops a pipeline: its sink could not write (a closed pipe, a full disk).
#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("writing to stdout")]
    Write(#[source] std::io::Error),
}

/// `S`, the sink, is any sink by default; a caller that must reach its own sink while the
/// pipeline runs (`capture` writes packets to the sink that comments them) names its type.
pub struct Pipeline<'s, S: Sink + ?Sized + 's = dyn Sink + 's> {
    decoder: Decoder,
    engine: Engine,
    /// `None`: the packets were not seen here and now, so this node's conntrack table and
    /// bridge settings say nothing about them.
    enricher: Option<Enricher>,
    sink: Box<S>,
    /// What the sink may borrow.
    sink_lifetime: PhantomData<&'s ()>,
    /// `--packets`: every observation is written too.
    print_packets: bool,
    observations: Vec<Observation>,
    /// For packets placed by their source, where no node says which addresses a namespace
    /// holds: the addresses servers were seen answering from.
    answered_from: AnsweredFrom,
    /// When each query sent back in an ICMP destination unreachable was last seen so: the
    /// ICMP message is seen at every hop back to the sender, and is one drop.
    refusals: Table<MessageKey, SystemTime, FastHash>,
    findings: Vec<Finding>,
    /// Packets seen on an interface `points` could not place (it had just gone away).
    unplaced_records: u64,
    malformed_samples: SampleRate,
}

/// Sightings of an ICMP error about one query this close together are one message crossing
/// hops; a retry refused again comes a resolver timeout later.
const ONE_ICMP_MESSAGE: Duration = Duration::from_millis(100);

/// Queries sent back in ICMP whose last sighting is kept, to tell hops from new messages.
const REFUSALS_REMEMBERED: usize = 4096;

/// Malformed packets are shown at most once per reason per this long of packet time (every one
/// is counted): enough to see what they look like, never a flood.
const MALFORMED_SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// When a sample of each malformed reason was last shown.
#[derive(Default)]
struct SampleRate {
    last: HashMap<Malformed, SystemTime>,
}

impl SampleRate {
    /// Whether a packet malformed for `reason` at `ts` is to be shown; if so, it counts as shown.
    fn due(&mut self, reason: Malformed, ts: SystemTime) -> bool {
        let due = self.last.get(&reason).is_none_or(|&last| {
            ts.duration_since(last)
                .is_ok_and(|since| since >= MALFORMED_SAMPLE_EVERY)
        });
        if due {
            self.last.insert(reason, ts);
        }
        due
    }
}

impl<'s, S: Sink + ?Sized + 's> Pipeline<'s, S> {
    pub fn new(
        decoder: Decoder,
        engine: Engine,
        enricher: Enricher,
        sink: Box<S>,
        print_packets: bool,
    ) -> Self {
        Self {
            decoder,
            engine,
            enricher: Some(enricher),
            sink,
            sink_lifetime: PhantomData,
            print_packets,
            observations: Vec::new(),
            answered_from: AnsweredFrom::default(),
            refusals: Table::with_hasher(REFUSALS_REMEMBERED),
            findings: Vec::new(),
            unplaced_records: 0,
            malformed_samples: SampleRate::default(),
        }
    }

    /// A pipeline for packets captured elsewhere or earlier: its findings get no evidence
    /// from the machine it runs on.
    pub fn without_enrichment(
        decoder: Decoder,
        engine: Engine,
        sink: Box<S>,
        print_packets: bool,
    ) -> Self {
        Self {
            enricher: None,
            ..Self::new(decoder, engine, Enricher::default(), sink, print_packets)
        }
    }

    /// Starts from `answered_from`, learnt from the whole capture beforehand: a server that
    /// answered only after a loop began still shows that its namespace holds the address.
    pub fn knowing_answers(mut self, answered_from: AnsweredFrom) -> Self {
        self.answered_from = answered_from;
        self
    }

    /// The sink, for what its owner writes to it besides the pipeline's output.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Decodes `packet`, which its source placed itself with `place` (see
    /// `source::capture_file::placement`), analyses it, and writes what it proves. Returns why
    /// it yielded no observation, if it did not.
    pub fn ingest_placed<'p>(
        &mut self,
        packet: &RawPacket,
        place: impl Fn(Seen) -> Option<&'p Arc<Point>>,
    ) -> Result<Result<(), NotDecoded>, PipelineError> {
        let decoded = self.decode(packet, &place)?;
        // A capture shows no drops, but a host sending a query back says so in ICMP.
        if let (Err(NotDecoded::NotDns), Some(point)) = (&decoded, place(packet.seen)) {
            if let Some(refused) = self.decoder.decode_refusal(packet, point) {
                self.refused(refused);
            }
        }
        for observation in &mut self.observations {
            self.answered_from.learn(observation);
            observation.to_own_address = self.answered_from.holds(observation);
        }
        self.analyze()?;
        Ok(decoded)
    }

    /// Decodes `packets` (placed by `points`), analyses them, and writes what they prove.
    pub fn ingest(
        &mut self,
        packets: &mut Vec<RawPacket>,
        points: &PointMap,
    ) -> Result<(), PipelineError> {
        for packet in packets.drain(..).filter(completes_for_analysis) {
            let place = |seen| points.get(seen);
            if let Err(NotDecoded::Unplaced) = self.decode(&packet, place)? {
                self.unplaced_records += 1;
            }
        }
        // Where the namespace a packet enters is known, so is whether it can be delivered
        // there: what tells a delivery from a packet the node holds and drops.
        for observation in &mut self.observations {
            observation.to_own_address = observation
                .point
                .enters
                .as_ref()
                .and_then(|namespace| points.holds(namespace, observation.dst.ip()));
        }
        self.analyze()
    }

    /// A drop of a query that a host sent back in ICMP (or of a reply whose reassembly it gave
    /// up), at its first sighting: where it left the namespace that sent it.
    fn refused(&mut self, refused: DroppedMessage) {
        let Some(key) = MessageKey::of_dropped(&refused) else {
            return;
        };
        let same_message = self.refusals.get(&key).is_some_and(|&last| {
            refused
                .ts
                .duration_since(last)
                .is_ok_and(|gap| gap < ONE_ICMP_MESSAGE)
        });
        self.refusals.insert(key, refused.ts);
        self.answered_from.learn_refusal(&refused);
        if !same_message {
            self.engine.dropped(refused, &mut self.findings);
        }
    }

    /// Decodes `packet`, placed by `place`, into `observations`; shows a sample of it if it is
    /// malformed. Packets that are not DNS were counted by the kernel (or the capture reader).
    fn decode<'p>(
        &mut self,
        packet: &RawPacket,
        place: impl Fn(Seen) -> Option<&'p Arc<Point>>,
    ) -> Result<Result<(), NotDecoded>, PipelineError> {
        let decoded = self.decoder.decode(packet, &place, &mut self.observations);
        if let Err(NotDecoded::Malformed(reason)) = decoded {
            if let Some(point) = place(packet.seen) {
                if self.malformed_samples.due(reason, packet.ts) {
                    let sample = self.decoder.malformed_sample(packet, point, reason);
                    self.sink.malformed(&sample).map_err(PipelineError::Write)?;
                }
            }
        }
        Ok(decoded)
    }

    /// Analyses the decoded observations and writes what they prove.
    fn analyze(&mut self) -> Result<(), PipelineError> {
        for observation in self.observations.drain(..) {
            if self.print_packets {
                self.sink
                    .packet(&observation)
                    .map_err(PipelineError::Write)?;
            }
            self.engine.observe(observation, &mut self.findings);
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
    ) -> Result<(), PipelineError> {
        for query in queries.drain(..) {
            let place = |seen| points.get(seen);
            match self.decoder.decode_unanswered(&query, place) {
                Some(observation) => self.engine.observe(observation, &mut self.findings),
                None => self.unplaced_records += 1,
            }
        }
        self.emit()
    }

    /// Decodes the DNS messages the kernel dropped, at the places `place` names their devices,
    /// and reports them. Drops on DNS ports that hold no DNS message are left out: the kernel
    /// counted them by reason.
    pub fn ingest_drops(
        &mut self,
        drops: &mut Vec<DroppedPacket>,
        place: impl Fn(InterfaceRef) -> DropPlace,
    ) -> Result<(), PipelineError> {
        for dropped in drops.drain(..) {
            if let Some(message) = self.decoder.decode_drop(&dropped, place(dropped.device)) {
                self.engine.dropped(message, &mut self.findings);
            }
        }
        self.emit()
    }

    /// Time has reached `now`: writes what waited for it (deadlines, settled packets).
    pub fn tick(&mut self, now: SystemTime) -> Result<(), PipelineError> {
        self.advance(now)?;
        self.sink.flush().map_err(PipelineError::Write)
    }

    /// As `tick`, but leaves packet lines in the sink's buffer (findings are always flushed):
    /// for a capture file, read as fast as it can be, where nobody waits on each line.
    pub fn advance(&mut self, now: SystemTime) -> Result<(), PipelineError> {
        self.decoder.expire(now, &mut self.observations);
        self.analyze()?;
        self.engine.tick(now, &mut self.findings);
        self.emit()
    }

    /// The input ended at `now`: writes the last findings and the summary, with the numbers of
    /// the `source` the packets came from (given the count of unplaced packets). The servers' answer statistics are
    /// taken from `servers` when given (the kernel counts every answer; the analyzers see only
    /// what was streamed).
    pub fn finish(
        mut self,
        now: SystemTime,
        servers: Option<Vec<ServerSummary>>,
        source: impl FnOnce(u64, ReassemblyCounts) -> SummarySource,
    ) -> Result<(), PipelineError> {
        self.decoder.finish(&mut self.observations);
        self.analyze()?;
        let reassembly = self.decoder.reassembly();
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
        emit(&mut findings, enricher.as_mut(), sink.as_mut())?;
        sink.summary(&summary, &source(unplaced_records, reassembly))
            .map_err(PipelineError::Write)
    }

    fn emit(&mut self) -> Result<(), PipelineError> {
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
    sink: &mut (impl Sink + ?Sized),
) -> Result<(), PipelineError> {
    for mut finding in findings.drain(..) {
        match (&mut finding, enricher.as_deref_mut()) {
            (Finding::UnexpectedSource(unexpected), Some(enricher)) => enricher.enrich(unexpected),
            (Finding::Loop(found), Some(enricher)) => enricher.enrich_loop(found),
            (Finding::Lookup(found), Some(enricher)) => enricher.enrich_lookup(found),
            (Finding::Timeout(found), Some(enricher)) => enricher.enrich_timeout(found),
            _ => {}
        }
        sink.finding(&finding).map_err(PipelineError::Write)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_packets_are_shown_once_per_reason_per_second() {
        let at = |millis| SystemTime::UNIX_EPOCH + Duration::from_millis(millis);
        let mut rate = SampleRate::default();
        assert!(rate.due(Malformed::DnsCompressionPointer, at(0)));
        assert!(!rate.due(Malformed::DnsCompressionPointer, at(999)));
        assert!(
            rate.due(Malformed::BadIhl, at(999)),
            "each reason has its own"
        );
        assert!(rate.due(Malformed::DnsCompressionPointer, at(1_000)));
        assert!(
            !rate.due(Malformed::DnsCompressionPointer, at(10)),
            "an older packet is not due"
        );
    }
}
