//! Truncated answers not retried over TCP: an answer with TC set reached its client, and the
//! client did not ask the question again over TCP within the wait. A resolver that takes the
//! cut answer as it is (musl's before 1.2.4, in Alpine images) gets fewer records than exist,
//! or none, and never says so.
//!
//! The client view (`client_view`) hands in each answer that reached its client, and every
//! query sent over TCP. A retry is the client's address asking the same question over TCP: it
//! comes from a new socket, with a new ID, and may go to another of its servers.
//!
//! A forwarder (CoreDNS, node-local-dns, dnsmasq) that asked over UDP passes a truncated answer
//! on to its own client as it is, at once, and asks again over TCP only when that client does.
//! So a truncated answer to the same question reaching another client right after ends the
//! first one's wait: its own client decides, and only the client at the end of the chain is
//! reported. (Two clients that each take a cut answer to one question within that moment are
//! reported as the later one: a finding missed, never one made up.)
use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime},
};

use super::{
    has_waited, later,
    outstanding::SentQuery,
    packet::QuestionKey,
    repeats::{Repeated, Repeats},
    table::Table,
};
use crate::{
    finding::{Finding, TruncationFinding},
    observation::{Observation, Transport},
    present::{mnemonic, names::Names},
};

/// A forwarder passes a truncated answer on within this long of getting it: the time to cross
/// a node or two, with room to spare.
const PASSED_ON_WITHIN: Duration = Duration::from_millis(250);

/// Judges truncated answers; a client's answers from one server not retried are reported when
/// first seen, then at most once per report interval, with their count.
pub struct Truncations {
    wait: Duration,
    /// Truncated answers whose retry is awaited, by client address and question, oldest first.
    awaited: Table<(IpAddr, QuestionKey), Awaited>,
    /// The latest client of each question awaited, and when its truncated answer came: the
    /// forwarder that may pass it on.
    latest: Table<QuestionKey, (IpAddr, SystemTime)>,
    reports: Repeats<(IpAddr, SocketAddr), TruncationFinding>,
    names: Names,
}

/// A truncated answer that reached its client at `at`.
struct Awaited {
    at: SystemTime,
    query: SentQuery,
    size: usize,
}

impl Truncations {
    /// A retry is awaited `wait` after the truncated answer.
    pub fn new(wait: Duration, report_interval: Duration, capacity: usize, names: Names) -> Self {
        Self {
            wait,
            awaited: Table::new(capacity),
            latest: Table::new(capacity),
            reports: Repeats::new(report_interval, capacity),
            names,
        }
    }

    /// `reply` answered `query` at its client: a truncated answer over UDP awaits its retry,
    /// and ends the wait of the forwarder that passed it on.
    pub fn answered(&mut self, query: &SentQuery, reply: &Observation) {
        if !reply.truncated || reply.transport != Transport::Udp {
            return;
        }
        let question = QuestionKey::of(&query.question);
        let client = query.client.ip();
        if let Some((forwarder, at)) = self.latest.remove(&question) {
            let passed_on = forwarder != client && !has_waited(at, PASSED_ON_WITHIN, reply.ts);
            if passed_on {
                self.awaited.remove(&(forwarder, question.clone()));
            }
        }
        self.latest.insert(question.clone(), (client, reply.ts));
        let key = (client, question);
        if self.awaited.get(&key).is_none() {
            let awaited = Awaited {
                at: reply.ts,
                query: query.clone(),
                size: reply.size,
            };
            self.awaited.insert(key, awaited);
        }
    }

    /// `query`, not a response, was sent: over TCP, it retries its client's truncated answers
    /// to the question.
    pub fn asked(&mut self, query: &Observation) {
        if query.transport != Transport::Tcp {
            return;
        }
        if let Some(question) = &query.question {
            self.awaited
                .remove(&(query.src.ip(), QuestionKey::of(question)));
        }
    }

    /// As `Analyzer::tick`: the answers whose retry did not come within the wait are reported.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        while let Some((_, awaited)) = self
            .awaited
            .pop_stalest_if(|_, awaited| has_waited(awaited.at, self.wait, now))
        {
            self.not_retried(awaited, out);
        }
        while self
            .latest
            .pop_stalest_if(|_, &(_, at)| has_waited(at, PASSED_ON_WITHIN, now))
            .is_some()
        {}
    }

    /// As `Analyzer::finish`, at `now`: the answers still awaiting a retry are judged as far as
    /// the input goes, and every count not yet reported is.
    pub fn finish(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.tick(now, out);
        out.extend(self.reports.unreported().map(Finding::TruncatedNotRetried));
    }

    /// Entries dropped from full tables so far.
    pub fn evictions(&self) -> u64 {
        self.awaited.evictions() + self.latest.evictions() + self.reports.evictions()
    }

    fn not_retried(&mut self, awaited: Awaited, out: &mut Vec<Finding>) {
        let query = &awaited.query;
        let at = later(awaited.at, self.wait);
        let key = (query.client.ip(), query.server.into());
        let wait = self.wait;
        let found = self.reports.occurred(key, at, || {
            Some(TruncationFinding::new(
                at,
                query,
                awaited.size,
                wait,
                &self.names,
            ))
        });
        out.extend(found.map(Finding::TruncatedNotRetried));
    }
}

impl TruncationFinding {
    fn new(at: SystemTime, query: &SentQuery, size: usize, wait: Duration, names: &Names) -> Self {
        let mut found = Self {
            ts: at,
            client: query.client.into(),
            client_namespace: query.client_namespace.clone(),
            server: query.server.into(),
            id: query.id,
            qname: query.question.name.presented(names),
            qtype: query.question.qtype,
            size,
            waited: wait,
            count: 1,
            summary: String::new(),
        };
        found.summary = found.describe();
        found
    }

    fn describe(&self) -> String {
        let client = match &self.client_namespace {
            Some(namespace) => format!("{} ({namespace})", self.client.ip()),
            None => self.client.ip().to_string(),
        };
        let answers = match self.count {
            1 => "a truncated answer".to_owned(),
            count => format!("{count} truncated answers"),
        };
        format!(
            "{client} took {answers} from {server} (the latest for {qname} {qtype}, {size} bytes, \
             TC set) and did not ask again over TCP within {wait:.1}s: it uses the cut answer, \
             as musl's resolver before 1.2.4 does; make the answer fit (fewer records, CoreDNS \
             `bufsize 1232`) or use a resolver that retries over TCP",
            server = self.server,
            qname = self.qname,
            qtype = mnemonic::qtype(self.qtype),
            size = self.size,
            wait = self.waited.as_secs_f64(),
        )
    }
}

impl Repeated for TruncationFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        self.count = count;
        self.ts = last;
        self.summary = self.describe();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyzers::{client_view::ClientView, Analyzer},
        testkit::observations::*,
    };

    const WAIT: Duration = Duration::from_secs(2);

    fn view() -> ClientView {
        ClientView::new(WAIT, Duration::from_secs(10), 1024, Names::AsSent)
    }

    /// The client's query for `name` over UDP at `at` ms, answered truncated 1 ms later.
    fn truncated(name: &str, id: u16, at: u64) -> Vec<Observation> {
        vec![
            query(name)
                .id(id)
                .to("10.96.0.10:53")
                .at_ms(at)
                .seen(CLIENT_OUT),
            reply(name)
                .id(id)
                .truncated()
                .from("10.96.0.10:53")
                .to("10.244.0.2:41234")
                .at_ms(at + 1)
                .seen(CLIENT_IN),
        ]
    }

    /// The client asking `name` again over TCP, from another port and ID, at `at` ms.
    fn retried_over_tcp(name: &str, at: u64) -> Vec<Observation> {
        vec![
            query(name)
                .id(7000)
                .tcp()
                .from("10.244.0.2:50000")
                .to("10.96.0.10:53")
                .at_ms(at)
                .seen(CLIENT_OUT),
            reply(name)
                .id(7000)
                .tcp()
                .from("10.96.0.10:53")
                .to("10.244.0.2:50000")
                .at_ms(at + 1)
                .seen(CLIENT_IN),
        ]
    }

    fn not_retried(findings: &[Finding]) -> Vec<&TruncationFinding> {
        findings
            .iter()
            .filter_map(|finding| match finding {
                Finding::TruncatedNotRetried(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_truncated_answer_retried_over_tcp_is_no_finding() {
        let mut observations = truncated("big.test.", 1, 0);
        observations.extend(retried_over_tcp("big.test.", 3));
        let findings = run(&mut view(), observations, ms(60_000));
        assert_eq!(not_retried(&findings), Vec::<&TruncationFinding>::new());
    }

    #[test]
    fn a_truncated_answer_not_retried_names_client_server_and_question() {
        let findings = run(&mut view(), truncated("big.test.", 1, 0), ms(60_000));
        let found = not_retried(&findings);
        assert_eq!(found.len(), 1, "{findings:?}");
        let found = found[0];
        assert_eq!(found.client.to_string(), "10.244.0.2:41234");
        assert_eq!(found.server.to_string(), "10.96.0.10:53");
        assert_eq!(found.qname, "big.test.");
        assert_eq!(found.count, 1);
        assert_eq!(found.ts, ms(2_001), "judged when the wait ended");
        assert!(
            found.summary.contains("did not ask again over TCP"),
            "{}",
            found.summary
        );
    }

    #[test]
    fn a_retry_of_another_question_or_over_udp_does_not_count() {
        let mut observations = truncated("big.test.", 1, 0);
        observations.extend(retried_over_tcp("other.test.", 3));
        // The same question again over UDP is no retry over TCP.
        observations.extend(truncated("big.test.", 2, 500));
        let findings = run(&mut view(), observations, ms(60_000));
        assert_eq!(not_retried(&findings).len(), 1, "{findings:?}");
    }

    #[test]
    fn repeats_are_counted_into_one_report_per_interval() {
        let mut observations = Vec::new();
        for n in 0..5u16 {
            observations.extend(truncated(&format!("n{n}.test."), n, u64::from(n) * 100));
        }
        let mut view = view();
        let mut findings = run(&mut view, observations, ms(5_000));
        view.finish(ms(5_000), &mut findings);
        let counts: Vec<u64> = not_retried(&findings)
            .iter()
            .map(|found| found.count)
            .collect();
        assert_eq!(
            counts,
            [1, 5],
            "the first at once, the rest together at the end"
        );
    }

    #[test]
    fn a_forwarder_passing_a_truncated_answer_on_leaves_the_retry_to_its_client() {
        // CoreDNS asks upstream over UDP and passes the cut answer on to the client, which
        // takes it as it is: only the client is reported.
        let observations = vec![
            query("big.test.")
                .id(1)
                .to("10.96.0.10:53")
                .at_ms(0)
                .seen(CLIENT_OUT),
            query("big.test.")
                .id(2)
                .from("10.244.0.3:33333")
                .to("10.255.0.53:53")
                .at_ms(1)
                .seen(COREDNS_OUT),
            reply("big.test.")
                .id(2)
                .truncated()
                .from("10.255.0.53:53")
                .to("10.244.0.3:33333")
                .at_ms(3)
                .seen(COREDNS_IN),
            reply("big.test.")
                .id(1)
                .truncated()
                .from("10.96.0.10:53")
                .to("10.244.0.2:41234")
                .at_ms(4)
                .seen(CLIENT_IN),
        ];
        let findings = run(&mut view(), observations, ms(60_000));
        let clients: Vec<String> = not_retried(&findings)
            .iter()
            .map(|found| found.client.to_string())
            .collect();
        assert_eq!(clients, ["10.244.0.2:41234"]);
    }

    #[test]
    fn answers_without_tc_or_over_tcp_await_nothing() {
        let mut observations = vec![client_asks(1, 0), client_gets_reply(1, "10.96.0.10:53", 1)];
        observations.extend(retried_over_tcp("a.test.", 10));
        let findings = run(&mut view(), observations, ms(60_000));
        assert_eq!(not_retried(&findings), Vec::<&TruncationFinding>::new());
    }
}
