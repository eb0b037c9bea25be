//! Replies as the clients see them: one table of the queries they sent (`outstanding`), and the
//! analyses that judge against it. A reply from elsewhere is a misdelivery
//! (`unexpected_source`), an answer counts for its server's latency (`latency`), a truncated
//! answer awaits the client's retry over TCP (`truncation`), an answer ends a lookup that may
//! have gone through the search list first (`search_list`), and a query that waited too long
//! has timed out (`timeout`). Each query is recorded, answered or expired once, for all.
//!
//! Whether a query that timed out was caught in a loop is the forwarding-loop analyzer's to
//! say: the engine hands it in (`timeout::Loops`) with each observation and tick.
use std::time::{Duration, SystemTime};

use super::{
    outstanding::{Outstanding, Reply, SentQuery},
    packet::MessageKey,
    search_list::SearchLists,
    server_answers::ServerAnswers,
    servfail::ServfailStorms,
    summary::TimeoutCounts,
    timeout::{Loops, Timeouts},
    truncation::Truncations,
    unexpected_source::UnexpectedSources,
    ServerSummary,
};
use crate::{finding::Finding, observation::Observation, present::names::Names};

pub struct ClientView {
    waiting: Outstanding,
    unexpected_sources: UnexpectedSources,
    timeouts: Timeouts,
    answers: ServerAnswers,
    truncations: Truncations,
    search_lists: SearchLists,
    servfail_storms: ServfailStorms,
}

impl ClientView {
    /// A query is awaited `timeout`; a misdelivery, or a server's timeouts for one question, are
    /// reported again at most once per `report_interval`; findings write names as `names`
    /// says.
    pub fn new(
        timeout: Duration,
        report_interval: Duration,
        capacity: usize,
        names: Names,
    ) -> Self {
        Self {
            waiting: Outstanding::new(timeout, capacity),
            unexpected_sources: UnexpectedSources::new(report_interval, capacity, names.clone()),
            timeouts: Timeouts::new(timeout, report_interval, capacity, names.clone()),
            answers: ServerAnswers::new(capacity),
            truncations: Truncations::new(timeout, report_interval, capacity, names.clone()),
            search_lists: SearchLists::new(report_interval, capacity, names),
            servfail_storms: ServfailStorms::new(report_interval, capacity),
        }
    }

    /// Queries still awaited, not `timeout` old yet, that would be reported if they timed out.
    pub fn unanswered(&self) -> usize {
        self.waiting
            .queries()
            .filter(|query| !query.repeats_timed_out)
            .count()
    }

    /// Every query that timed out so far, and how they were reported.
    pub fn timeouts(&self) -> TimeoutCounts {
        self.timeouts.counts()
    }

    /// Every server that answered, in address order.
    pub fn servers(&self) -> Vec<ServerSummary> {
        self.answers.servers()
    }

    /// Entries dropped from each analysis's full tables so far, by its name: the queries
    /// dropped from the shared table are lost to all.
    pub fn evictions(&self) -> [(&'static str, u64); 6] {
        let waiting = self.waiting.evictions();
        [
            (
                "unexpected_source",
                waiting + self.unexpected_sources.evictions(),
            ),
            ("timeout", waiting + self.timeouts.evictions()),
            ("latency", waiting + self.answers.evictions()),
            (
                "truncated_not_retried",
                waiting + self.truncations.evictions(),
            ),
            ("search_list", waiting + self.search_lists.evictions()),
            ("servfail", waiting + self.servfail_storms.evictions()),
        ]
    }

    /// Takes the next non-partial observation, as `Analyzer::observe`. Returns the query it
    /// answered, if it is the reply that reached that query's client from where it went.
    pub fn observe_with(
        &mut self,
        obs: &Observation,
        message: Option<&MessageKey>,
        loops: &mut impl Loops,
        out: &mut Vec<Finding>,
    ) -> Option<SentQuery> {
        let timeouts_from = out.len();
        self.tick_with(obs.ts, loops, out);
        let key = message?;
        if !obs.is_response {
            let timeouts = &self.timeouts;
            // Its first sighting only: a query's later hops are the same query.
            if self.waiting.query(key, obs, || timeouts.reported(key)) {
                self.truncations.asked(obs);
                self.search_lists.asked(obs);
            }
            return None;
        }
        match self.waiting.reply(key, obs) {
            Some(Reply::Answer(query)) => {
                self.answers.answered(&query, obs);
                self.truncations.answered(&query, obs);
                self.search_lists.answered(&query, obs);
                self.servfail_storms
                    .answered(query.server.into(), obs.rcode, obs.ts, out);
                return Some(query);
            }
            Some(Reply::FromElsewhere(query)) => {
                if let Some(found) = self.unexpected_sources.misdelivered(query, obs) {
                    // A misdelivery goes ahead of the timeouts its moment made due, as
                    // misdeliveries go ahead of timeouts at the end.
                    out.insert(timeouts_from, Finding::UnexpectedSource(found));
                }
            }
            None => {}
        }
        None
    }

    /// As `Analyzer::tick`.
    pub fn tick_with(&mut self, now: SystemTime, loops: &mut impl Loops, out: &mut Vec<Finding>) {
        while let Some((key, query)) = self.waiting.pop_expired(now) {
            self.timeouts.expired(key, query, loops, out);
        }
        self.timeouts.tick(now, out);
        self.truncations.tick(now, out);
        self.search_lists.tick(now, out);
    }

    /// As `Analyzer::finish`.
    pub fn finish_with(&mut self, now: SystemTime, loops: &mut impl Loops, out: &mut Vec<Finding>) {
        out.extend(
            self.unexpected_sources
                .unreported()
                .map(Finding::UnexpectedSource),
        );
        self.tick_with(now, loops, out);
        self.timeouts.finish(out);
        self.truncations.finish(now, out);
        self.search_lists.finish(now, out);
        self.servfail_storms.finish(out);
    }

    /// What failed on the node, for the SERVFAIL storms it may explain: the timeouts among
    /// `findings`.
    pub fn failures_behind(&mut self, findings: &[Finding]) {
        for finding in findings {
            if let Finding::Timeout(timeout) = finding {
                self.servfail_storms
                    .timed_out(timeout.server, timeout.count, timeout.ts);
            }
        }
    }

    /// The kernel dropped a DNS packet for `reason` at `at`.
    pub fn dropped(&mut self, reason: &std::sync::Arc<str>, at: SystemTime) {
        self.servfail_storms.dropped(reason, 1, at);
    }
}

/// No question ever loops.
#[cfg(test)]
pub struct NoLoops;

#[cfg(test)]
impl Loops for NoLoops {
    fn unanswered_in_loop(&mut self, _: &super::packet::QuestionKey, _: SystemTime) -> bool {
        false
    }
}

/// The view alone, as if no loop were ever found: how its analyses are tested.
#[cfg(test)]
impl super::Analyzer for ClientView {
    fn observe(&mut self, obs: &Observation, message: Option<&MessageKey>, out: &mut Vec<Finding>) {
        self.observe_with(obs, message, &mut NoLoops, out);
    }

    fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.tick_with(now, &mut NoLoops, out);
    }

    fn finish(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.finish_with(now, &mut NoLoops, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analyzers::Analyzer, testkit::observations::*};

    const WAIT: Duration = Duration::from_secs(2);

    fn analyzer() -> ClientView {
        ClientView::new(WAIT, Duration::from_secs(10), 1024, Names::AsSent)
    }

    fn kinds(findings: &[Finding]) -> Vec<&'static str> {
        findings
            .iter()
            .map(|finding| match finding {
                Finding::Loop(found) if found.is_possible() => "possible loop",
                Finding::Loop(_) => "loop",
                Finding::UnexpectedSource(_) => "unexpected source",
                Finding::Timeout(_) => "timeout",
                Finding::Drop(_) => "drop",
                Finding::Lookup(_) => "lookup",
                Finding::TruncatedNotRetried(_) => "truncated not retried",
                Finding::SearchListWaste(_) => "search list waste",
                Finding::ServfailStorm(_) => "servfail storm",
                Finding::FragmentedReplyLost(_) => "fragmented reply lost",
            })
            .collect()
    }

    #[test]
    fn an_answered_query_is_gone_for_all_three() {
        let mut view = analyzer();
        let findings = run(
            &mut view,
            vec![
                client_asks(1, 0),
                client_gets_reply(1, "10.96.0.10:53", 5),
                // Too late for the query, which is no longer awaited: no misdelivery, no
                // second latency.
                client_gets_reply(1, "10.244.0.3:53", 6),
                client_gets_reply(1, "10.96.0.10:53", 7),
            ],
            ms(10_000),
        );
        assert_eq!(kinds(&findings), Vec::<&str>::new());
        assert_eq!(view.unanswered(), 0);
        let servers = view.servers();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].answered, 1);
    }

    #[test]
    fn a_misdelivered_reply_leaves_the_query_awaited_until_it_times_out_once() {
        let mut view = analyzer();
        let findings = run(
            &mut view,
            vec![
                client_asks(1, 0),
                client_gets_reply(1, "10.244.0.3:53", 5),
                // The client retries with the same id and port, before and after the timeout.
                client_asks(1, 1000),
                client_asks(1, 2500),
            ],
            ms(10_000),
        );
        assert_eq!(kinds(&findings), ["unexpected source", "timeout"]);
        assert_eq!(view.servers(), []);
        // Nor is the misdelivery's count reported again at the end: it was reported at once.
        let mut rest = Vec::new();
        view.finish(ms(30_000), &mut rest);
        assert_eq!(kinds(&rest), Vec::<&str>::new());
    }

    #[test]
    fn a_query_sent_on_to_a_second_server_is_answered_by_either() {
        // dnsmasq sends a query its first server left unanswered to all its servers, with the
        // same id from the same port: the second one's reply is the answer.
        let mut view = analyzer();
        let second = query("a.test.")
            .id(1)
            .to("10.255.0.53:53")
            .at_ms(1000)
            .seen(CLIENT_OUT);
        let findings = run(
            &mut view,
            vec![
                client_asks(1, 0),
                second,
                client_gets_reply(1, "10.255.0.53:53", 1005),
            ],
            ms(10_000),
        );
        assert_eq!(kinds(&findings), Vec::<&str>::new());
        assert_eq!(view.servers()[0].server.to_string(), "10.255.0.53:53");
        assert_eq!(view.servers()[0].answered, 1);
    }

    #[test]
    fn a_retry_after_the_timeout_is_answered_and_counted() {
        let mut view = analyzer();
        let findings = run(
            &mut view,
            vec![
                client_asks(1, 0),
                client_asks(1, 2500),
                client_gets_reply(1, "10.96.0.10:53", 2510),
            ],
            ms(10_000),
        );
        assert_eq!(kinds(&findings), ["timeout"]);
        assert_eq!(view.servers()[0].answered, 1);
        assert_eq!(view.unanswered(), 0);
    }

    #[test]
    fn a_misdelivery_is_written_ahead_of_the_timeouts_due_at_its_moment() {
        let findings = run(
            &mut analyzer(),
            vec![
                // Another domain's name: a second timeout of one domain's names to one server
                // waits to be counted.
                query("b.other.")
                    .id(1)
                    .to("10.96.0.10:53")
                    .at_ms(0)
                    .seen(CLIENT_OUT),
                client_asks(2, 1500),
                client_gets_reply(2, "10.244.0.3:53", 2000),
            ],
            ms(10_000),
        );
        assert_eq!(
            kinds(&findings),
            ["unexpected source", "timeout", "timeout"]
        );
    }
}
