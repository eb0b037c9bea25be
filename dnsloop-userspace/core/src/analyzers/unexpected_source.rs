//! Replies from an unexpected source: a reply reaches the client with the right id and port,
//! but from an address or port other than the one the query was sent to, so the client's
//! socket drops it (typically a CoreDNS pod's reply that was never translated back to the
//! ClusterIP). Why it happened is for an enricher to find from conntrack; this only proves it.
use std::{
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use super::{
    outstanding::SentQuery,
    repeats::{Repeated, Repeats},
};
use crate::{finding::UnexpectedSourceFinding, observation::Observation, present::names::Names};

/// One kind of misdelivery: this client, expecting replies from there, got them from here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Misdelivery {
    client: SocketAddr,
    expected: SocketAddr,
    actual: SocketAddr,
}

/// Judges the replies that the shared table of outstanding queries (`client_view`) finds come
/// from somewhere other than where their query went.
pub struct UnexpectedSources {
    reports: Repeats<Misdelivery, UnexpectedSourceFinding>,
    names: Names,
}

impl UnexpectedSources {
    /// Each misdelivery is reported again at most once per `report_interval`.
    pub fn new(report_interval: Duration, capacity: usize, names: Names) -> Self {
        Self {
            reports: Repeats::new(report_interval, capacity),
            names,
        }
    }

    /// `reply` came to `query`'s client from elsewhere: what to report now, if anything.
    pub fn misdelivered(
        &mut self,
        query: &SentQuery,
        reply: &Observation,
    ) -> Option<UnexpectedSourceFinding> {
        let misdelivery = Misdelivery {
            client: query.client.into(),
            expected: query.server.into(),
            actual: reply.src,
        };
        self.reports.occurred(misdelivery, reply.ts, || {
            Some(finding(query, reply, &self.names))
        })
    }

    /// The input has ended: the last counts of misdeliveries reported before.
    pub fn unreported(&mut self) -> impl Iterator<Item = UnexpectedSourceFinding> + '_ {
        self.reports.unreported()
    }

    pub fn evictions(&self) -> u64 {
        self.reports.evictions()
    }
}

fn finding(query: &SentQuery, reply: &Observation, names: &Names) -> UnexpectedSourceFinding {
    UnexpectedSourceFinding {
        ts: reply.ts,
        client: query.client.into(),
        expected: query.server.into(),
        actual: reply.src,
        id: query.id,
        qname: query.question.name.presented(names),
        qtype: query.question.qtype,
        transport: reply.transport,
        conntrack: None,
        cause: None,
        summary: summary(
            query.client.into(),
            query.id,
            reply.src,
            query.server.into(),
            1,
        ),
    }
}

fn summary(
    client: SocketAddr,
    id: u16,
    actual: SocketAddr,
    expected: SocketAddr,
    count: u64,
) -> String {
    let mut summary = format!(
        "reply to {client} id {id} came from {actual}, but the query went to {expected}: the client's socket drops it"
    );
    if count > 1 {
        summary.push_str(&format!(" ({count} such replies so far)"));
    }
    summary
}

impl Repeated for UnexpectedSourceFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        self.ts = last;
        // The finding has no field for the count: the summary line carries it.
        self.summary = summary(self.client, self.id, self.actual, self.expected, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyzers::{client_view::ClientView, Analyzer},
        finding::Finding,
        testkit::observations::*,
    };

    fn analyzer() -> ClientView {
        ClientView::new(
            Duration::from_secs(2),
            Duration::from_secs(10),
            1024,
            Names::AsSent,
        )
    }

    /// The misdeliveries among `findings` (the queries they answered also time out).
    fn sources(findings: Vec<Finding>) -> Vec<UnexpectedSourceFinding> {
        findings
            .into_iter()
            .filter_map(|finding| match finding {
                Finding::UnexpectedSource(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    /// The client asks kube-dns at `at` ms; the bridge DNATs the query to CoreDNS, whose reply
    /// leaves its pod from the pod address and enters the client's pod from `seen_from`.
    fn exchange(id: u16, at: u64, seen_from: &str) -> Vec<Observation> {
        [
            vec![query("www.example.test.")
                .id(id)
                .to("10.96.0.10:53")
                .at_ms(at)
                .seen(CLIENT_OUT)],
            vec![query("www.example.test.")
                .id(id)
                .to("10.244.0.3:53")
                .at_ms(at)
                .seen(COREDNS_IN)],
            reply("www.example.test.")
                .id(id)
                .from("10.244.0.3:53")
                .to("10.244.0.2:41234")
                .at_ms(at + 1)
                .route(&[COREDNS_OUT]),
            reply("www.example.test.")
                .id(id)
                .from(seen_from)
                .to("10.244.0.2:41234")
                .at_us(at * 1000 + 1010)
                .route(&[CLIENT_IN]),
        ]
        .concat()
    }

    #[test]
    fn a_reply_translated_back_to_the_cluster_ip_is_expected_though_it_left_the_pod_from_its_own_address(
    ) {
        assert_eq!(
            run(
                &mut analyzer(),
                exchange(4242, 0, "10.96.0.10:53"),
                ms(5_000)
            ),
            []
        );
    }

    #[test]
    fn a_reply_entering_the_client_from_the_pod_address_is_reported_at_that_hop() {
        let found = sources(run(
            &mut analyzer(),
            exchange(4242, 0, "10.244.0.3:53"),
            ms(5_000),
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        let found = &found[0];
        assert_eq!(found.ts, us(1010));
        assert_eq!(found.client, addr("10.244.0.2:41234"));
        assert_eq!(found.expected, addr("10.96.0.10:53"));
        assert_eq!(found.actual, addr("10.244.0.3:53"));
        assert_eq!(
            (found.id, found.qname.as_str(), found.qtype),
            (4242, "www.example.test.", A)
        );
        assert_eq!(
            (found.conntrack.as_ref(), found.cause.as_ref()),
            (None, None)
        );
        assert_eq!(
            found.summary,
            "reply to 10.244.0.2:41234 id 4242 came from 10.244.0.3:53, but the query went to 10.96.0.10:53: the client's socket drops it"
        );
    }

    #[test]
    fn repeats_are_counted_and_reported_once_per_interval() {
        let observations: Vec<Observation> = (0..12u16)
            .flat_map(|n| exchange(n, u64::from(n) * 1000, "10.244.0.3:53"))
            .collect();
        let mut analyzer = analyzer();
        let mut found = sources(run(&mut analyzer, observations, ms(20_000)));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[1].summary.ends_with("(11 such replies so far)"),
            "{}",
            found[1].summary
        );
        let mut last = Vec::new();
        analyzer.finish(ms(20_000), &mut last);
        found = sources(last);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].summary.ends_with("(12 such replies so far)"),
            "{}",
            found[0].summary
        );
    }
}
