//! Findings counted on their way to the output: the sink that writes them is wrapped, so
//! detection does not know it is being counted.
use std::{cell::RefCell, io, rc::Rc};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use serde_json::Value;

use super::servers::ServerLabels;
use crate::{
    analyze::Summary, decode::MalformedSample, finding::Finding, observation::Observation,
    sink::Sink,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabel {
    pub server: String,
}

/// The counters of findings, as registered.
#[derive(Clone, Debug, Default)]
pub struct FindingCounts {
    loops: Counter,
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
            "dnsloop_unexpected_sources",
            "Replies from an unexpected source reported (dropped by the client's socket): once \
             when found, then at most once per --report-interval while they go on",
            counts.unexpected_sources.clone(),
        );
        registry.register(
            "dnsloop_timeouts",
            "Queries with no answer after --timeout, by the server they were sent to (a \
             client's retries of one query count once)",
            counts.timeouts.clone(),
        );
        counts
    }

    fn count(&self, finding: &Finding, servers: &mut ServerLabels) {
        match finding {
            Finding::Loop(_) => {
                self.loops.inc();
            }
            Finding::UnexpectedSource(_) => {
                self.unexpected_sources.inc();
            }
            Finding::Timeout(timeout) => {
                let label = ServerLabel {
                    server: servers.label(timeout.server),
                };
                self.timeouts.get_or_create(&label).inc();
            }
        }
    }
}

/// Counts each finding, then hands everything to the sink it wraps.
pub struct CountingSink<'a> {
    inner: Box<dyn Sink + 'a>,
    counts: FindingCounts,
    servers: Rc<RefCell<ServerLabels>>,
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
        }
    }
}

impl Sink for CountingSink<'_> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.counts.count(finding, &mut self.servers.borrow_mut());
        self.inner.finding(finding)
    }

    fn packet(&mut self, obs: &Observation) -> io::Result<()> {
        self.inner.packet(obs)
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        self.inner.malformed(sample)
    }

    fn summary(&mut self, summary: &Summary, extra: &Value) -> io::Result<()> {
        self.inner.summary(summary, extra)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
