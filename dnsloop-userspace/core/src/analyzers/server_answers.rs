//! Latency and response codes per server, as the clients saw them: from a query's first
//! sighting to its reply entering the client's namespace. For the summary only.
use std::{collections::BTreeMap, net::SocketAddr};

use super::{histogram::Histogram, outstanding::SentQuery, summary::ServerSummary, table::Table};
use crate::observation::Observation;

/// A node talks to a few dozen servers; past this many, the least recently used is dropped.
const MAX_SERVERS: usize = 1024;

/// Counts the answers the shared table of outstanding queries (`client_view`) matches to their
/// queries; replies later than its wait are not counted (they are timeouts).
pub struct ServerAnswers {
    servers: Table<SocketAddr, ServerStats>,
}

struct ServerStats {
    latency: Histogram,
    rcodes: BTreeMap<u16, u64>,
    truncated: u64,
}

impl ServerAnswers {
    pub fn new(capacity: usize) -> Self {
        Self {
            servers: Table::new(MAX_SERVERS.min(capacity)),
        }
    }

    /// `reply` answered `query`.
    pub fn answered(&mut self, query: &SentQuery, reply: &Observation) {
        let latency = reply.ts.duration_since(query.sent).unwrap_or_default();
        let record = |stats: &mut ServerStats| {
            stats.latency.record(latency);
            *stats.rcodes.entry(reply.rcode).or_default() += 1;
            stats.truncated += u64::from(reply.truncated);
        };
        // Looked up once for a server already known: its address is hashed with SipHash.
        match self.servers.refresh(&query.server.into()) {
            Some(stats) => record(stats),
            None => {
                let mut stats = ServerStats {
                    latency: Histogram::new(),
                    rcodes: BTreeMap::new(),
                    truncated: 0,
                };
                record(&mut stats);
                self.servers.insert(query.server.into(), stats);
            }
        }
    }

    /// Every server that answered, in address order.
    pub fn servers(&self) -> Vec<ServerSummary> {
        let mut servers: Vec<ServerSummary> = self
            .servers
            .iter()
            .map(|(&server, stats)| {
                ServerSummary::new(
                    server,
                    &stats.latency,
                    stats.rcodes.clone(),
                    stats.truncated,
                )
            })
            .collect();
        servers.sort_by_key(|summary| summary.server);
        servers
    }

    pub fn evictions(&self) -> u64 {
        self.servers.evictions()
    }
}

#[cfg(test)]
mod tests {
    use crate::present::names::Names;
    use std::time::Duration;

    use super::*;
    use crate::{analyzers::client_view::ClientView, testkit::observations::*};

    /// A client query to `server` at `at` ms, answered with `rcode`: the reply leaves the node,
    /// then enters the client `after` ms after the query was sent.
    fn answered(id: u16, server: &str, at: u64, after: u64, rcode: u16) -> Vec<Observation> {
        [
            query("a.test.")
                .id(id)
                .to(server)
                .at_ms(at)
                .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
            reply("a.test.")
                .id(id)
                .rcode(rcode)
                .from(server)
                .to("10.244.0.2:41234")
                .at_us((at + after) * 1000 - 10)
                .route(&[NODE_TO_BRIDGE, CLIENT_IN]),
        ]
        .concat()
    }

    #[test]
    fn percentiles_and_rcodes_per_server() {
        let mut observations = Vec::new();
        for n in 1..=100u16 {
            let rcode = if n % 10 == 0 { 3 } else { 0 };
            observations.extend(answered(
                n,
                "169.254.25.10:53",
                200 * u64::from(n),
                u64::from(n),
                rcode,
            ));
        }
        observations.extend(answered(500, "10.96.0.10:53", 0, 7, 2));
        let mut latency = ClientView::new(
            Duration::from_secs(2),
            Duration::from_secs(10),
            1024,
            Names::AsSent,
        );
        assert_eq!(run(&mut latency, observations, ms(60_000)), []);

        let servers = latency.servers();
        let addresses: Vec<String> = servers
            .iter()
            .map(|server| server.server.to_string())
            .collect();
        assert_eq!(addresses, ["10.96.0.10:53", "169.254.25.10:53"]);
        let cache = &servers[1];
        assert_eq!(cache.answered, 100);
        let within_an_eighth = |actual: Duration, expected_ms: u64| {
            let expected = Duration::from_millis(expected_ms);
            assert!(
                actual >= expected && actual <= expected + expected / 8,
                "{actual:?} vs {expected:?}"
            );
        };
        within_an_eighth(cache.p50, 50);
        within_an_eighth(cache.p90, 90);
        within_an_eighth(cache.p99, 99);
        assert_eq!(cache.max, Duration::from_millis(100));
        assert_eq!(cache.rcodes, BTreeMap::from([(0, 90), (3, 10)]));
        assert_eq!(servers[0].rcodes, BTreeMap::from([(2, 1)]));
        assert_eq!(servers[0].max, Duration::from_millis(7));
    }

    #[test]
    fn replies_after_the_wait_are_not_latencies() {
        let mut latency = ClientView::new(
            Duration::from_secs(2),
            Duration::from_secs(10),
            1024,
            Names::AsSent,
        );
        run(
            &mut latency,
            answered(1, "169.254.25.10:53", 0, 2500, 0),
            ms(10_000),
        );
        assert_eq!(latency.servers(), []);
    }
}
