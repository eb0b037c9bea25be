//! Findings counted on their way to the output: the sink that writes them is wrapped, so
//! detection does not know it is being counted.
//!
//! Every query that timed out is counted, though a storm of them is reported in few findings:
//! a timeout finding counts `count` queries, and a loop's report says how many of its queries
//! went `unanswered` so far, of which the counter takes what is new since the loop's previous
//! report. Truncated answers not retried, and replies lost to fragmentation, are counted the
//! same way from their reports' counts so far.
use std::{
    cell::RefCell,
    collections::HashMap,
    hash::Hash,
    io,
    net::{IpAddr, SocketAddr},
    rc::Rc,
};

use super::servers::ServerLabels;
use dnsloop_core::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
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

/// The most findings whose reported count so far is remembered. Beyond them, a finding's every
/// report is counted in full: more than happened, not fewer.
const MAX_REPORTS_REMEMBERED: usize = 4096;

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
    stale_conntrack_timeouts: Family<ServerLabel, Counter>,
    truncations_not_retried: Family<ServerLabel, Counter>,
    search_list_wasted: Family<ServerLabel, Counter>,
    servfail_storms: Counter,
    fragmented_replies_lost: Family<ServerLabel, Counter>,
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
        registry.register(
            "dnsloop_stale_conntrack_timeouts",
            "Queries with no answer after --timeout whose flow conntrack still sent to a backend \
             nothing answers for (a stale entry, left when the backend went), by the server \
             they were sent to",
            counts.stale_conntrack_timeouts.clone(),
        );
        registry.register(
            "dnsloop_truncations_not_retried",
            "Truncated answers (TC set) whose client did not ask again over TCP within \
             --timeout, by the server that sent them: the client used a cut answer",
            counts.truncations_not_retried.clone(),
        );
        registry.register(
            "dnsloop_search_list_wasted_queries",
            "Clients' queries of search-list expansions answered NXDOMAIN before the name they \
             expanded was asked (ndots), by the server asked; counted where every DNS packet is \
             analysed (--slow, --packets)",
            counts.search_list_wasted.clone(),
        );
        registry.register(
            "dnsloop_servfail_storms",
            "SERVFAIL storms reported (a server answering SERVFAIL at least 10 times a second, \
             in a fifth of its answers): once when found, then at most once per \
             --report-interval while it goes on; counted where every DNS packet is analysed",
            counts.servfail_storms.clone(),
        );
        registry.register(
            "dnsloop_fragmented_replies_lost",
            "DNS replies lost to fragmentation, by the server that sent them: a host on their way \
             held the first fragment and gave up waiting for the rest (FRAG_REASM_TIMEOUT); the \
             client got no answer",
            counts.fragmented_replies_lost.clone(),
        );
        counts
    }

    fn count(&self, finding: &Finding, servers: &mut ServerLabels, so_far: &mut CountsSoFar) {
        match finding {
            // Its unanswered queries are reported as timeouts: it may be no loop.
            Finding::Loop(found) if found.is_possible() => {
                self.possible_loops.inc();
            }
            Finding::Loop(found) => {
                self.loops.inc();
                let key = (found.qname.clone(), found.qtype);
                let unanswered = so_far.loops.new_since_last_report(key, found.unanswered);
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
                if timeout.stale_conntrack.is_some() {
                    self.stale_conntrack_timeouts
                        .get_or_create(&label)
                        .inc_by(timeout.count);
                }
            }
            // Counted by reason from the kernel's own counters (`dnsloop_dns_drops`), which
            // also count the drops whose records a full ring lost.
            Finding::Drop(_) => {}
            // A slow answer is no fault of its own: the summary counts them.
            Finding::Lookup(_) => {}
            Finding::TruncatedNotRetried(found) => {
                let key = (found.client.ip(), found.server);
                let new = so_far.truncations.new_since_last_report(key, found.count);
                let label = ServerLabel {
                    server: servers.label(found.server),
                };
                self.truncations_not_retried
                    .get_or_create(&label)
                    .inc_by(new);
            }
            // Each report counts what the client wasted since its previous one.
            Finding::SearchListWaste(found) => {
                let label = ServerLabel {
                    server: servers.label(found.server),
                };
                self.search_list_wasted
                    .get_or_create(&label)
                    .inc_by(found.wasted);
            }
            Finding::ServfailStorm(_) => {
                self.servfail_storms.inc();
            }
            Finding::FragmentedReplyLost(found) => {
                let key = (found.client.ip(), found.server);
                let new = so_far.fragmented.new_since_last_report(key, found.count);
                let label = ServerLabel {
                    server: servers.label(found.server),
                };
                self.fragmented_replies_lost
                    .get_or_create(&label)
                    .inc_by(new);
            }
        }
    }
}

/// The counts so far that repeated findings last reported.
#[derive(Default)]
struct CountsSoFar {
    /// Each loop's `unanswered`, by its question as written: a loop's reports all carry the
    /// question of its first.
    loops: ReportedSoFar<(String, u16)>,
    /// Truncated answers not retried, by client address and server.
    truncations: ReportedSoFar<(IpAddr, SocketAddr)>,
    /// Replies lost to fragmentation, by client address and server.
    fragmented: ReportedSoFar<(IpAddr, SocketAddr)>,
}

/// A count so far, as each finding under `K` last reported it.
struct ReportedSoFar<K> {
    reported: HashMap<K, u64>,
}

impl<K> Default for ReportedSoFar<K> {
    fn default() -> Self {
        Self {
            reported: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> ReportedSoFar<K> {
    /// How much more `so_far` is than the previous report under `key` said.
    fn new_since_last_report(&mut self, key: K, so_far: u64) -> u64 {
        match self.reported.get_mut(&key) {
            Some(reported) => {
                let new = so_far.saturating_sub(*reported);
                *reported = (*reported).max(so_far);
                new
            }
            None => {
                if self.reported.len() < MAX_REPORTS_REMEMBERED {
                    self.reported.insert(key, so_far);
                }
                so_far
            }
        }
    }
}

/// Counts each finding, then hands everything to the sink it wraps.
pub struct CountingSink<'a> {
    inner: Box<dyn Sink + 'a>,
    counts: FindingCounts,
    servers: Rc<RefCell<ServerLabels>>,
    so_far: CountsSoFar,
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
            so_far: CountsSoFar::default(),
        }
    }
}

impl Sink for CountingSink<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.counts
            .count(finding, &mut self.servers.borrow_mut(), &mut self.so_far);
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
