//! Timeouts: queries that got no reply from where they were sent within `timeout`.
//!
//! Each query is attributed to the server it was first seen addressed to. A forwarder's own
//! query is a query like any other, so a stub domain forwarded to a dead upstream shows up as
//! the forwarder's query to that upstream timing out.
//!
//! A storm of them stays a few lines: a query whose question is caught in a reported loop is
//! counted in the loop's report (a loop's every forward is a new query), and after one server's
//! first timeout for a name of a domain, its further ones for that domain's names are counted and
//! reported together at most once per `report_interval`. A dead stub domain's server asked
//! thousands of distinct names so makes a report per interval, not one per name; and a name is
//! grouped with its siblings, not its whole zone, so that unrelated faults stay apart.
use std::{
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use super::{
    has_waited, later,
    outstanding::SentQuery,
    packet::{MessageKey, QuestionKey},
    summary::TimeoutCounts,
    table::{FastHash, Table},
};
use crate::{
    finding::{Finding, TimeoutFinding},
    observation::{DnsName, FoldedName},
    present::{mnemonic, names::Names},
};

/// How long a timed-out query is remembered, so that the client's later retries of it (same
/// id and port) are not reported again: glibc tries twice 5 s apart per server, dig three
/// times 5 s apart.
const RETRIES_LAST: Duration = Duration::from_secs(20);

/// The loops found, as the timeout judgement asks about them.
pub trait Loops {
    /// Whether `question` was caught in a reported loop still going round when a query of it
    /// was sent at `sent`; if so, counts that query unanswered in the loop's report.
    fn unanswered_in_loop(&mut self, question: &QuestionKey, sent: SystemTime) -> bool;
}

/// One server's timeouts for the names of one domain after the first: counted per window of
/// `report_interval` from the first, and reported when the window ends.
struct Repeating {
    window_start: SystemTime,
    pending: Option<Pending>,
}

struct Pending {
    count: u64,
    /// The latest query counted, which the report names.
    latest: SentQuery,
    /// Every query counted asked the latest's question.
    one_question: bool,
}

/// Judges the queries that waited `timeout` in the shared table of outstanding queries
/// (`client_view`), which ends a query's wait at a reply from where it went: one from
/// elsewhere is dropped by the client, which goes on waiting.
pub struct Timeouts {
    timeout: Duration,
    report_interval: Duration,
    /// Queries already reported, by when they were sent.
    timed_out: Table<MessageKey, SystemTime, FastHash>,
    /// By server and the domain of the question's name (see `domain_of`).
    repeating: Table<(SocketAddr, FoldedName), Repeating>,
    counts: TimeoutCounts,
    names: Names,
}

impl Timeouts {
    pub fn new(
        timeout: Duration,
        report_interval: Duration,
        capacity: usize,
        names: Names,
    ) -> Self {
        Self {
            timeout,
            report_interval,
            timed_out: Table::with_hasher(capacity),
            repeating: Table::new(capacity),
            counts: TimeoutCounts::default(),
            names,
        }
    }

    /// Whether a query under `key` now repeats one already reported.
    pub fn reported(&self, key: &MessageKey) -> bool {
        self.timed_out.get(key).is_some()
    }

    /// `query` has waited `timeout` for its reply: counted in its loop's report if its question
    /// loops, else reported, at once if it is its server's first for the question lately, in
    /// a count later if not; unless it repeats a query that was.
    pub fn expired(
        &mut self,
        key: MessageKey,
        query: SentQuery,
        loops: &mut impl Loops,
        out: &mut Vec<Finding>,
    ) {
        if query.repeats_timed_out {
            return;
        }
        self.counts.queries += 1;
        if loops.unanswered_in_loop(&key.question, query.sent) {
            // Not remembered for retries: a loop's forwards are new queries every time.
            self.counts.in_loops += 1;
            return;
        }
        let at = self.deadline(&query);
        let repeat = (
            query.server.into(),
            domain_of(&query.question.name).folded().clone(),
        );
        self.timed_out.insert(key, query.sent);
        self.end_windows(&repeat, at, out);
        if let Some(repeating) = self.repeating.get_mut(&repeat) {
            self.counts.in_repeats += 1;
            match &mut repeating.pending {
                Some(pending) => {
                    pending.count += 1;
                    pending.one_question &= QuestionKey::of(&pending.latest.question)
                        == QuestionKey::of(&query.question);
                    pending.latest = query;
                }
                None => {
                    repeating.pending = Some(Pending {
                        count: 1,
                        latest: query,
                        one_question: true,
                    })
                }
            }
            return;
        }
        out.push(Finding::Timeout(self.finding(&query, 1, true)));
        let first = Repeating {
            window_start: at,
            pending: None,
        };
        if let Some((_, evicted)) = self.repeating.insert(repeat, first) {
            // Its count is reported early rather than lost.
            out.extend(self.report(evicted.pending));
        }
    }

    /// Time has reached `now`: the counts of windows that ended are reported, and retries of
    /// what was reported before `RETRIES_LAST` are new queries again.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        while self
            .timed_out
            .pop_stalest_if(|_, &sent| has_waited(sent, RETRIES_LAST, now))
            .is_some()
        {}
        let interval = self.report_interval;
        while let Some((repeat, mut repeating)) = self
            .repeating
            .pop_stalest_if(|_, repeating| has_waited(repeating.window_start, interval, now))
        {
            // A window that counted nothing ends the repeats: the next timeout is a first.
            if let Some(pending) = repeating.pending.take() {
                out.extend(self.report(Some(pending)));
                repeating.window_start = next_window(repeating.window_start, interval, now);
                self.repeating.insert(repeat, repeating);
            }
        }
    }

    /// The input has ended: reports every count not reported yet.
    pub fn finish(&mut self, out: &mut Vec<Finding>) {
        while let Some((_, repeating)) = self.repeating.pop_stalest_if(|_, _| true) {
            out.extend(self.report(repeating.pending));
        }
    }

    pub fn counts(&self) -> TimeoutCounts {
        self.counts
    }

    pub fn evictions(&self) -> u64 {
        self.timed_out.evictions() + self.repeating.evictions()
    }

    /// Ends the windows of `repeat` that ended by `at`, as `tick` would have if told the time
    /// in between, so that counts do not depend on when the clock was read.
    fn end_windows(
        &mut self,
        repeat: &(SocketAddr, FoldedName),
        at: SystemTime,
        out: &mut Vec<Finding>,
    ) {
        let interval = self.report_interval;
        while let Some(repeating) = self
            .repeating
            .get_mut(repeat)
            .filter(|repeating| has_waited(repeating.window_start, interval, at))
        {
            let Some(pending) = repeating.pending.take() else {
                self.repeating.remove(repeat);
                return;
            };
            repeating.window_start = next_window(repeating.window_start, interval, at);
            self.repeating.refresh(repeat);
            out.extend(self.report(Some(pending)));
        }
    }

    fn report(&self, pending: Option<Pending>) -> Option<Finding> {
        let Pending {
            count,
            latest,
            one_question,
        } = pending?;
        Some(Finding::Timeout(self.finding(&latest, count, one_question)))
    }

    fn deadline(&self, query: &SentQuery) -> SystemTime {
        later(query.sent, self.timeout)
    }

    /// The report of `count` queries, `query` the latest; the others asked its question too if
    /// `one_question`, else other names of its domain.
    fn finding(&self, query: &SentQuery, count: u64, one_question: bool) -> TimeoutFinding {
        let qname = query.question.name.presented(&self.names);
        let qtype = query.question.qtype;
        let server = SocketAddr::from(query.server);
        let qtype_name = mnemonic::qtype(qtype);
        let client = SocketAddr::from(query.client);
        let id = query.id;
        let waited = self.timeout.as_secs_f64();
        let interval = self.report_interval.as_secs_f64();
        let names_under =
            (!one_question).then(|| domain_of(&query.question.name).presented(&self.names));
        let summary = match (count, &names_under) {
            (1, _) => format!(
                "no answer from {server} for {qname} {qtype_name} (client {client}, id {id}) after {waited:.1}s"
            ),
            (_, None) => format!(
                "no answer from {server} for {qname} {qtype_name}: {count} more queries within \
                 {interval:.1}s (the latest from client {client}, id {id}), each after {waited:.1}s",
            ),
            (_, Some(domain)) => format!(
                "no answer from {server} for names in {domain}: {count} more queries within \
                 {interval:.1}s (the latest for {qname} {qtype_name} from client {client}, id \
                 {id}), each after {waited:.1}s",
            ),
        };
        TimeoutFinding {
            ts: self.deadline(query),
            client,
            server,
            id,
            count,
            qname,
            qtype,
            names_under,
            waited: self.timeout,
            // The engine says, from the drops it saw.
            dropped: None,
            stale_conntrack: None,
            summary,
        }
    }
}

/// The domain whose names' timeouts at one server are counted together: the name's parent (the
/// root's is the root). Siblings, not a zone: `a.corp.example.` and `b.corp.example.` meet,
/// `x.a.corp.example.` does not, so a report never lumps a whole tree of faults together.
fn domain_of(name: &DnsName) -> DnsName {
    name.parent().unwrap_or_else(|| name.clone())
}

/// The window after the one from `start`: `interval` later, or from `now` if that does not fit
/// in a `SystemTime`.
fn next_window(start: SystemTime, interval: Duration, now: SystemTime) -> SystemTime {
    start.checked_add(interval).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyzers::{client_view::ClientView, Analyzer},
        observation::Observation,
        testkit::observations::*,
    };

    const WAIT: Duration = Duration::from_secs(2);

    fn analyzer() -> ClientView {
        ClientView::new(WAIT, Duration::from_secs(10), 1024, Names::AsSent)
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

    /// CoreDNS forwarding `name` to a dead upstream as query `id`, at `at` ms.
    fn forward_to_dead_upstream(name: &str, id: u16, at: u64) -> Observation {
        query(name)
            .id(id)
            .from("10.244.0.3:5353")
            .to("10.255.0.99:53")
            .at_ms(at)
            .seen(COREDNS_OUT)
    }

    fn counts(found: &[TimeoutFinding]) -> Vec<u64> {
        found.iter().map(|found| found.count).collect()
    }

    #[test]
    fn a_dead_upstream_asked_one_name_500_times_is_a_few_counted_reports() {
        // Every 60 ms for 30 s, each a new query.
        let observations: Vec<Observation> = (0..500)
            .map(|n| forward_to_dead_upstream("x.corp.example.", n, u64::from(n) * 60))
            .collect();
        let mut view = analyzer();
        let mut findings = run(&mut view, observations, ms(40_000));
        view.finish(ms(40_000), &mut findings);
        let found = timeouts(findings);
        // The first at once, then one per 10 s window from it: 2-12 s, 12-22 s, 22-32 s.
        assert_eq!(counts(&found), [1, 166, 167, 166], "{found:#?}");
        assert_eq!(found[0].ts, ms(2_000));
        assert_eq!(
            found[0].summary,
            "no answer from 10.255.0.99:53 for x.corp.example. A (client 10.244.0.3:5353, id 0) after 2.0s"
        );
        let last = &found[3];
        assert_eq!((last.id, last.ts), (499, ms(31_940)));
        assert_eq!(
            last.summary,
            "no answer from 10.255.0.99:53 for x.corp.example. A: 166 more queries within 10.0s \
             (the latest from client 10.244.0.3:5353, id 499), each after 2.0s"
        );
        assert_eq!(
            view.timeouts(),
            TimeoutCounts {
                queries: 500,
                in_loops: 0,
                in_repeats: 499
            }
        );
    }

    #[test]
    fn a_count_is_reported_once_its_window_ends_without_waiting_for_more() {
        let observations = (0..3)
            .map(|n| forward_to_dead_upstream("x.corp.example.", n, u64::from(n) * 100))
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(12_000)));
        assert_eq!(counts(&found), [1, 2]);
        assert_eq!(found[1].ts, ms(2_200));
    }

    #[test]
    fn names_of_distinct_domains_are_each_reported_at_once() {
        let observations = (0..100)
            .map(|n| forward_to_dead_upstream(&format!("www.n{n}.example."), n, u64::from(n)))
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(2_100)));
        assert_eq!(counts(&found), [1; 100]);
        assert!(found.iter().all(|found| found.names_under.is_none()));
    }

    #[test]
    fn a_dead_server_asked_many_names_of_one_domain_is_one_report_then_a_count() {
        // A stub domain's server gone: every name of the domain a query of its own, 100 in 0.1 s.
        let observations = (0..100)
            .map(|n| forward_to_dead_upstream(&format!("n{n}.corp.example."), n, u64::from(n)))
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(12_100)));
        assert_eq!(counts(&found), [1, 99], "{found:#?}");
        assert_eq!(found[0].names_under, None);
        let count = &found[1];
        assert_eq!(count.names_under.as_deref(), Some("corp.example."));
        assert_eq!((count.qname.as_str(), count.id), ("n99.corp.example.", 99));
        assert_eq!(
            count.summary,
            "no answer from 10.255.0.99:53 for names in corp.example.: 99 more queries within \
             10.0s (the latest for n99.corp.example. A from client 10.244.0.3:5353, id 99), each \
             after 2.0s"
        );
    }

    #[test]
    fn a_name_and_its_own_subdomain_are_counted_apart() {
        let observations = ["corp.example.", "x.corp.example.", "y.x.corp.example."]
            .into_iter()
            .zip(0..)
            .map(|(name, id)| forward_to_dead_upstream(name, id, u64::from(id)))
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(12_100)));
        assert_eq!(counts(&found), [1, 1, 1], "{found:#?}");
    }

    #[test]
    fn a_timeout_after_a_window_without_one_is_reported_at_once() {
        let observations = [0, 15_000, 30_000]
            .into_iter()
            .zip(0..)
            .map(|(at, id)| forward_to_dead_upstream("x.corp.example.", id, at))
            .collect();
        let found = timeouts(run(&mut analyzer(), observations, ms(40_000)));
        assert_eq!(counts(&found), [1, 1, 1]);
    }

    #[test]
    fn counts_do_not_depend_on_when_the_clock_is_read() {
        let observations: Vec<Observation> = (0..300)
            .map(|n| forward_to_dead_upstream("x.corp.example.", n, u64::from(n) * 77))
            .collect();
        let reports = |tick_every: Option<usize>| {
            let mut view = analyzer();
            let mut findings = Vec::new();
            for (n, obs) in observations.iter().enumerate() {
                observe(&mut view, obs, &mut findings);
                if tick_every.is_some_and(|every| n % every == 0) {
                    view.tick(obs.ts, &mut findings);
                }
            }
            view.finish(ms(60_000), &mut findings);
            let mut found = timeouts(findings);
            found.sort_by_key(|found| found.ts);
            found
        };
        let unticked = reports(None);
        assert_eq!(counts(&unticked).iter().sum::<u64>(), 300);
        assert_eq!(reports(Some(1)), unticked);
        assert_eq!(reports(Some(7)), unticked);
    }

    #[test]
    fn a_count_evicted_from_a_full_table_is_reported_early_and_the_eviction_counted() {
        let mut view = ClientView::new(WAIT, Duration::from_secs(10), 2, Names::AsSent);
        let mut findings = Vec::new();
        // Each query times out as the next is sent: a, a, b, b, then c needs the room of a's
        // count.
        let names = ["a.one.", "a.one.", "b.two.", "b.two.", "c.three."];
        for (id, name) in (0..).zip(names) {
            let obs = forward_to_dead_upstream(name, id, u64::from(id) * 2_000);
            observe(&mut view, &obs, &mut findings);
        }
        view.finish(ms(10_000), &mut findings);
        let found = timeouts(findings);
        let reports: Vec<(&str, u64, SystemTime)> = found
            .iter()
            .map(|found| (found.qname.as_str(), found.count, found.ts))
            .collect();
        assert_eq!(
            reports,
            [
                ("a.one.", 1, ms(2_000)),
                ("b.two.", 1, ms(6_000)),
                ("c.three.", 1, ms(10_000)),
                ("a.one.", 1, ms(4_000)),
                ("b.two.", 1, ms(8_000)),
            ]
        );
        // One count, and three of the five queries remembered against retries.
        assert_eq!(view.evictions()[1], ("timeout", 4));
    }
}
