//! Timeouts: queries that got no reply from where they were sent within `timeout`.
//!
//! Each query is attributed to the server it was first seen addressed to. A forwarder's own
//! query is a query like any other, so a stub domain forwarded to a dead upstream shows up as
//! the forwarder's query to that upstream timing out.
use std::time::{Duration, SystemTime};

use super::{
    has_waited, mnemonic,
    outstanding::SentQuery,
    packet::MessageKey,
    table::{FastHash, Table},
};
use crate::finding::{Finding, TimeoutFinding};

/// How long a timed-out query is remembered, so that the client's later retries of it (same
/// id and port) are not reported again: glibc tries twice 5 s apart per server, dig three
/// times 5 s apart.
const RETRIES_LAST: Duration = Duration::from_secs(20);

/// Judges the queries that waited `timeout` in the shared table of outstanding queries
/// (`client_view`), which ends a query's wait at a reply from where it went: one from
/// elsewhere is dropped by the client, which goes on waiting.
pub struct Timeouts {
    timeout: Duration,
    /// Queries already reported, by when they were sent.
    timed_out: Table<MessageKey, SystemTime, FastHash>,
}

impl Timeouts {
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        Self {
            timeout,
            timed_out: Table::with_hasher(capacity),
        }
    }

    /// Whether a query under `key` now repeats one already reported.
    pub fn reported(&self, key: &MessageKey) -> bool {
        self.timed_out.get(key).is_some()
    }

    /// `query` has waited `timeout` for its reply: reported, unless it repeats a query that was.
    pub fn expired(&mut self, key: MessageKey, query: SentQuery, out: &mut Vec<Finding>) {
        if query.repeats_timed_out {
            return;
        }
        self.timed_out.insert(key, query.sent);
        out.push(Finding::Timeout(self.finding(query)));
    }

    /// Time has reached `now`: retries of what was reported before `RETRIES_LAST` are new
    /// queries again.
    pub fn tick(&mut self, now: SystemTime) {
        while self
            .timed_out
            .pop_stalest_if(|_, &sent| has_waited(sent, RETRIES_LAST, now))
            .is_some()
        {}
    }

    pub fn evictions(&self) -> u64 {
        self.timed_out.evictions()
    }

    fn finding(&self, query: SentQuery) -> TimeoutFinding {
        let qname = query.question.name.presentation();
        let qtype = query.question.qtype;
        let summary = format!(
            "no answer from {server} for {qname} {qtype_name} (client {client}, id {id}) after {waited:.1}s",
            server = query.server,
            qtype_name = mnemonic::qtype(qtype),
            client = query.client,
            id = query.id,
            waited = self.timeout.as_secs_f64(),
        );
        TimeoutFinding {
            ts: query.sent.checked_add(self.timeout).unwrap_or(query.sent),
            client: query.client,
            server: query.server,
            id: query.id,
            qname,
            qtype,
            waited: self.timeout,
            summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyze::{client_view::ClientView, testkit::*, Analyzer},
        observation::Observation,
    };

    const WAIT: Duration = Duration::from_secs(2);

    fn analyzer() -> ClientView {
        ClientView::new(WAIT, Duration::from_secs(10), 1024)
    }

    /// The timeouts among `findings` (a reply from elsewhere is also a misdelivery).
    fn timeouts(findings: Vec<Finding>) -> Vec<TimeoutFinding> {
        findings
            .into_iter()
            .filter_map(|finding| match finding {
                Finding::Timeout(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_stub_domain_forwarded_to_a_dead_upstream_names_that_upstream() {
        const CORP: &str = "corp.example.";
        let observations = [
            // The client asks kube-dns; the bridge DNATs it to CoreDNS.
            vec![query(CORP)
                .id(5)
                .to("10.96.0.10:53")
                .at_ms(0)
                .seen(CLIENT_OUT)],
            query(CORP)
                .id(5)
                .to("10.244.0.3:53")
                .at_us(10)
                .route(&[COREDNS_IN]),
            // CoreDNS forwards the stub domain to an upstream that is gone.
            query(CORP)
                .id(77)
                .from("10.244.0.3:5353")
                .to("10.255.0.99:53")
                .at_ms(1)
                .route(&[COREDNS_OUT, NODE_FROM_BRIDGE, NODE_TO_UPLINK]),
            // CoreDNS gives up and answers SERVFAIL in time for the client.
            reply(CORP)
                .id(5)
                .rcode(2)
                .from("10.244.0.3:53")
                .to("10.244.0.2:41234")
                .at_ms(1500)
                .route(&[COREDNS_OUT]),
            reply(CORP)
                .id(5)
                .rcode(2)
                .from("10.96.0.10:53")
                .to("10.244.0.2:41234")
                .at_us(1_500_010)
                .route(&[CLIENT_IN]),
        ];
        let found = timeouts(run(&mut analyzer(), observations.concat(), ms(10_000)));
        assert_eq!(found.len(), 1, "{found:?}");
        let found = &found[0];
        assert_eq!(found.server, addr("10.255.0.99:53"));
        assert_eq!(found.client, addr("10.244.0.3:5353"));
        assert_eq!(found.id, 77);
        assert_eq!(found.ts, ms(2001));
        assert_eq!(found.waited, WAIT);
        assert_eq!(
            found.summary,
            "no answer from 10.255.0.99:53 for corp.example. A (client 10.244.0.3:5353, id 77) after 2.0s"
        );
    }

    #[test]
    fn retries_with_one_id_are_one_timeout() {
        let observations: Vec<Observation> = [0, 500, 1000, 2500, 7000]
            .into_iter()
            .flat_map(|at| {
                query("a.test.")
                    .id(9)
                    .at_ms(at)
                    .route(&[CLIENT_OUT, NODE_FROM_BRIDGE])
            })
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(20_000)));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].ts, ms(2000));
    }

    #[test]
    fn a_reply_from_elsewhere_does_not_end_the_wait_but_the_right_one_does() {
        let observations = vec![
            client_asks(1, 0),
            client_gets_reply(1, "10.244.0.3:53", 5),
            client_asks(2, 10),
            client_gets_reply(2, "10.96.0.10:53", 15),
        ];
        let found = timeouts(run(&mut analyzer(), observations, ms(10_000)));
        assert_eq!(found.iter().map(|found| found.id).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn finish_reports_what_is_due_and_leaves_the_rest_waiting() {
        let mut analyzer = analyzer();
        let mut findings = Vec::new();
        for (id, at) in [(1, 0), (2, 1500)] {
            observe(
                &mut analyzer,
                &query("a.test.").id(id).at_ms(at).seen(CLIENT_OUT),
                &mut findings,
            );
        }
        analyzer.finish(ms(2500), &mut findings);
        assert_eq!(
            timeouts(findings)
                .iter()
                .map(|found| found.id)
                .collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(analyzer.unanswered(), 1);
    }
}
