//! What a run amounted to, reported once at its end.
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use super::{histogram::Histogram, LookupSummary};
use crate::finding::Finding;

#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// When the run ended.
    pub at: SystemTime,
    pub observations: u64,
    /// Observations that arrived more than `settle` behind later ones: analysed out of order.
    pub late_observations: u64,
    pub findings: FindingCounts,
    pub timeouts: TimeoutCounts,
    /// Entries dropped from full tables, per stage: nonzero means `max_tracked` is too small
    /// for the traffic and some findings may have been missed.
    pub evictions: BTreeMap<&'static str, u64>,
    /// Queries still waiting for a reply when the input ended, not yet `timeout` old.
    pub unanswered_at_end: u64,
    /// Every server that answered, in address order.
    pub servers: Vec<ServerSummary>,
    /// The lookups followed, when they were (`EngineConfig::slow`).
    pub lookups: Option<LookupSummary>,
}

/// How many findings of each kind were reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FindingCounts {
    pub loops: u64,
    pub possible_loops: u64,
    pub unexpected_sources: u64,
    pub timeouts: u64,
    pub drops: u64,
    pub truncated_not_retried: u64,
    pub search_list_waste: u64,
    pub servfail_storms: u64,
    pub fragmented_replies_lost: u64,
}

impl FindingCounts {
    pub fn count(&mut self, findings: &[Finding]) {
        for finding in findings {
            match finding {
                Finding::Loop(found) if found.is_possible() => self.possible_loops += 1,
                Finding::Loop(_) => self.loops += 1,
                Finding::UnexpectedSource(_) => self.unexpected_sources += 1,
                Finding::Timeout(_) => self.timeouts += 1,
                Finding::Drop(_) => self.drops += 1,
                Finding::TruncatedNotRetried(_) => self.truncated_not_retried += 1,
                Finding::SearchListWaste(_) => self.search_list_waste += 1,
                Finding::ServfailStorm(_) => self.servfail_storms += 1,
                Finding::FragmentedReplyLost(_) => self.fragmented_replies_lost += 1,
                // Counted in the lookups' own summary.
                Finding::Lookup(_) => {}
            }
        }
    }
}

/// Every query that timed out, and how those not reported one by one were reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutCounts {
    /// Queries with no answer after `timeout` (a client's retries of one count once).
    pub queries: u64,
    /// Of those, the ones counted in the report of the loop their question was caught in.
    pub in_loops: u64,
    /// Of those, the ones counted in a repeated timeout's report (`TimeoutFinding::count`).
    pub in_repeats: u64,
}

/// The replies one server sent, as its clients received them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSummary {
    /// Where the queries were addressed when first seen, before any DNAT.
    pub server: SocketAddr,
    pub answered: u64,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Replies per response code.
    pub rcodes: BTreeMap<u16, u64>,
    /// Replies with TC set.
    pub truncated: u64,
}

impl ServerSummary {
    pub fn new(
        server: SocketAddr,
        latency: &Histogram,
        rcodes: BTreeMap<u16, u64>,
        truncated: u64,
    ) -> Self {
        Self {
            server,
            answered: latency.count(),
            p50: latency.quantile(0.50),
            p90: latency.quantile(0.90),
            p99: latency.quantile(0.99),
            max: latency.max(),
            rcodes,
            truncated,
        }
    }

    /// A server's answers as the kernel counted them: latencies in the shared buckets
    /// (`dnsloop_shared::latency_buckets`), the slowest, answers per rcode, and truncated ones.
    pub fn from_kernel_counts(
        server: SocketAddr,
        latency: &[u64; dnsloop_shared::latency_buckets::LATENCY_BUCKETS],
        max: Duration,
        rcodes: BTreeMap<u16, u64>,
        truncated: u64,
    ) -> Self {
        Self::new(
            server,
            &Histogram::from_counts(latency, max),
            rcodes,
            truncated,
        )
    }
}
