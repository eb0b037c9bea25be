//! Findings counted on their way to the output: the sink that writes them is wrapped, so
//! detection does not know it is being counted.
//!
//! Every query that timed out is counted, though a storm of them is reported in few findings:
//! a timeout finding counts `count` queries, and a loop's report says how many of its queries
//! went `unanswered` so far, of which the counter takes what is new since the loop's previous
//! report.
use std::{cell::RefCell, collections::HashMap, io, rc::Rc};

use super::servers::ServerLabels;
use dnsloop_core::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding, LoopFinding},
    observation::Observation,
    schema::SummarySource,
    sink::Sink,
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// The `server` of the queries of questions caught in a reported loop: they went to the
/// loop's servers in turn, and the loop's report counts them together.
pub const IN_LOOPS: &str = "loop";

/// The most loops whose reported `unanswered` is remembered. Beyond them, a loop's every
/// report is counted in full: more than the queries, not fewer.
const MAX_LOOPS_REMEMBERED: usize = 4096;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabel {
    pub server: String,
}

/// The counters of findings, as registered.
#[derive(Clone, Debug, Default)]
pub struct FindingCounts {
    loops: Counter,
    possible_loops: Counter,
    unexpected_sources: Counter,
    timeouts: Family<ServerLabel, Counter>,
}

impl FindingCounts {
    pub fn register(registry: &mut Registry) -> Self {
        let counts = Self::default();
        registry.register(
            "dnsloop_loops",
            "Forwarding loops reported: once when found, then at most once per \
             --report-interval while the loop goes on",
            counts.loops.clone(),
        );
        registry.register(
            "dnsloop_possible_loops",
            "Cycles of forwards that may be loops, where nothing showed that a namespace of the \
             cycle took the question in: counted apart from loops, and paging no one",
            counts.possible_loops.clone(),
        );
        registry.register(
            "dnsloop_unexpected_sources",
            "Replies from an unexpected source reported (dropped by the client's socket): once \
             when found, then at most once per --report-interval while they go on",
            counts.unexpected_sources.clone(),
        );
        registry.register(
            "dnsloop_timeouts",
            "Queries with no answer after --timeout, by the server they were sent to (a \
             client's retries of one query count once); those of a question caught in a \
             reported loop as server=\"loop\"",
            counts.timeouts.clone(),
        );
        counts
    }

    fn count(&self, finding: &Finding, servers: &mut ServerLabels, loops: &mut LoopsUnanswered) {
        match finding {
            // Its unanswered queries are reported as timeouts: it may be no loop.
            Finding::Loop(found) if found.is_possible() => {
                self.possible_loops.inc();
            }
            Finding::Loop(found) => {
                self.loops.inc();
                let unanswered = loops.new_since_last_report(found);
                if unanswered > 0 {
                    let label = ServerLabel {
                        server: IN_LOOPS.to_owned(),
                    };
                    self.timeouts.get_or_create(&label).inc_by(unanswered);
                }
            }
            Finding::UnexpectedSource(_) => {
                self.unexpected_sources.inc();
            }
            Finding::Timeout(timeout) => {
                let label = ServerLabel {
                    server: servers.label(timeout.server),
                };
                self.timeouts.get_or_create(&label).inc_by(timeout.count);
            }
            // Counted by reason from the kernel's own counters (`dnsloop_dns_drops`), which
            // also count the drops whose records a full ring lost.
            Finding::Drop(_) => {}
            // A slow answer is no fault of its own: the summary counts them.
            Finding::Lookup(_) => {}
        }
    }
}

/// Each loop's `unanswered` as last reported, by its question as written: a loop's reports all
/// carry the question of its first.
#[derive(Default)]
struct LoopsUnanswered {
    reported: HashMap<(String, u16), u64>,
}

impl LoopsUnanswered {
    /// How many more queries `found` says went unanswered than its loop's previous report.
    fn new_since_last_report(&mut self, found: &LoopFinding) -> u64 {
        let key = (found.qname.clone(), found.qtype);
        match self.reported.get_mut(&key) {
            Some(reported) => {
                let new = found.unanswered.saturating_sub(*reported);
                *reported = (*reported).max(found.unanswered);
                new
            }
            None => {
                if self.reported.len() < MAX_LOOPS_REMEMBERED {
                    self.reported.insert(key, found.unanswered);
                }
                found.unanswered
            }
        }
    }
}

/// Counts each finding, then hands everything to the sink it wraps.
pub struct CountingSink<'a> {
    inner: Box<dyn Sink + 'a>,
    counts: FindingCounts,
    servers: Rc<RefCell<ServerLabels>>,
    loops: LoopsUnanswered,
}

impl<'a> CountingSink<'a> {
    pub fn new(
        inner: Box<dyn Sink + 'a>,
        counts: FindingCounts,
        servers: Rc<RefCell<ServerLabels>>,
    ) -> Self {
        Self {
            inner,
            counts,
            servers,
            loops: LoopsUnanswered::default(),
        }
    }
}

impl Sink for CountingSink<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.counts
            .count(finding, &mut self.servers.borrow_mut(), &mut self.loops);
        self.inner.finding(finding)
    }

    fn packet(&mut self, obs: &Observation) -> io::Result<()> {
        self.inner.packet(obs)
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        self.inner.malformed(sample)
    }

    fn bundle(&mut self, notice: &BundleNotice) -> io::Result<()> {
        self.inner.bundle(notice)
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()> {
        self.inner.summary(summary, source)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
