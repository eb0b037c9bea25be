//! The engine: puts observations back in timestamp order and runs every analyzer on them.
//!
//! It also links the two: a query that times out while its question is caught in a reported
//! loop is one more of the loop's forwards left unanswered, counted in the loop's report (see
//! `impl Loops for ForwardingLoops`), so that a loop storm does not bury the loop under a
//! timeout per forward.
use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

use super::{
    client_view::ClientView,
    drops::Drops,
    forwarding_loop::ForwardingLoops,
    fragmentation::FragmentedReplies,
    lookups::Lookups,
    packet::{MessageKey, QuestionKey},
    reorder::Reorder,
    summary::FindingCounts,
    timeout::Loops,
    Analyzer, Summary,
};
use crate::{
    finding::Finding,
    observation::{DroppedMessage, Observation},
    present::names::Names,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// A query with no reply this long after it was sent has timed out.
    pub timeout: Duration,
    /// A namespace that sends a question within this long after it was delivered the same
    /// question (and has not answered it) is taken to forward it. Resolvers retry a forward
    /// seconds later (unbound after 3 s), and a retry is a forward too. The kernel programs
    /// keep a question hot as long (`ProgramConfig::hot_window_ns`).
    pub forward_window: Duration,
    /// How far out of timestamp order observations may arrive, and how long a packet that
    /// entered a namespace may take to leave it again if it is only routed through. A loop is
    /// reported once observation time is twice this long past the packet that proves it; a
    /// timeout this long after its deadline.
    pub settle: Duration,
    /// A loop, a client receiving replies from the wrong source, or a server's timeouts for one
    /// question, are reported when first seen, then at most once per this long while they go
    /// on.
    pub loop_report_interval: Duration,
    /// The most entries any one table holds.
    pub max_tracked: usize,
    /// Follow every client's query through the forwards it caused, and report those answered
    /// this long or more after they were sent (`lookups`); `None`: do not follow them. Needs
    /// every DNS packet: with only some streamed, lookups go unseen.
    pub slow: Option<Duration>,
    /// How findings write the names they are about: as sent, or redacted. The analyzers judge
    /// the names as sent either way.
    pub names: Names,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            forward_window: Duration::from_secs(5),
            settle: Duration::from_millis(50),
            loop_report_interval: Duration::from_secs(10),
            max_tracked: 65_536,
            slow: None,
            names: Names::AsSent,
        }
    }
}

pub struct Engine {
    reorder: Reorder,
    loops: ForwardingLoops,
    clients: ClientView,
    drops: Drops,
    fragments: FragmentedReplies,
    lookups: Option<Lookups>,
    /// When the analyzers were last told the time (`Analyzer::tick`).
    ticked: Option<SystemTime>,
    observations: u64,
    findings: FindingCounts,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Self {
        let EngineConfig {
            timeout,
            forward_window,
            settle,
            loop_report_interval,
            max_tracked,
            slow,
            names,
        } = config;
        Self {
            reorder: Reorder::new(settle, max_tracked),
            loops: ForwardingLoops::new(
                settle,
                forward_window,
                loop_report_interval,
                max_tracked,
                names.clone(),
            ),
            clients: ClientView::new(timeout, loop_report_interval, max_tracked, names.clone()),
            drops: Drops::new(loop_report_interval, max_tracked, names.clone()),
            fragments: FragmentedReplies::new(
                settle,
                loop_report_interval,
                max_tracked,
                names.clone(),
            ),
            lookups: slow.map(|slow| Lookups::new(slow, settle, timeout, max_tracked, names)),
            ticked: None,
            observations: 0,
            findings: FindingCounts::default(),
        }
    }

    /// Takes the next observation. Observations may arrive up to `settle` out of timestamp
    /// order; each is analysed once the stream has moved `settle` past it.
    pub fn observe(&mut self, obs: Observation, out: &mut Vec<Finding>) {
        self.observations += 1;
        self.reorder.push(obs);
        self.run_due(out);
    }

    /// The kernel dropped `dropped`. Drops come from their own source, apart from the packets
    /// seen, and need no reordering: a timeout it explains is judged seconds later, and a query
    /// dropped where it stayed is known not to be taken in there when that is decided, `settle`
    /// after the packets around it.
    pub fn dropped(&mut self, dropped: DroppedMessage, out: &mut Vec<Finding>) {
        if let Some(message) = MessageKey::of_dropped_query(&dropped) {
            let namespace = dropped.cause.place.namespace.clone();
            self.loops.dropped(message, namespace, dropped.ts);
        }
        let start = out.len();
        self.clients.dropped(&dropped.cause.reason, dropped.ts);
        self.fragments.dropped(&dropped);
        self.drops.dropped(dropped, out);
        self.findings.count(&out[start..]);
    }

    /// The clock reads `now`, on the observations' clock: what happened up to `now - settle`
    /// is final, even if no observation has come since.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.reorder.advance(now);
        self.run_due(out);
    }

    /// The input has ended at `now`: analyses what is still held, reports what every analyzer
    /// still holds back (queries past their deadline, loops' final counts), and sums up.
    pub fn finish(mut self, now: SystemTime, out: &mut Vec<Finding>) -> Summary {
        let start = out.len();
        while let Some(obs) = self.reorder.pop() {
            self.feed(&obs, out);
        }
        // The loops' final reports come last, to count the timeouts judged at the end.
        self.loops.tick(now, out);
        self.clients.finish_with(now, &mut self.loops, out);
        self.loops.finish(now, out);
        self.drops.finish(out);
        self.fragments.finish(out);
        self.explain_timeouts(&mut out[start..]);
        if let Some(lookups) = &mut self.lookups {
            lookups.finish(&self.loops, out);
        }
        self.findings.count(&out[start..]);
        let mut evictions = BTreeMap::from([
            ("reorder", self.reorder.overflows()),
            ("forwarding_loop", self.loops.evictions()),
            ("drops", self.drops.evictions()),
            ("fragmentation", self.fragments.evictions()),
        ]);
        evictions.extend(self.clients.evictions());
        if let Some(lookups) = &self.lookups {
            evictions.insert("lookups", lookups.evictions());
        }
        Summary {
            at: now,
            observations: self.observations,
            late_observations: self.reorder.late(),
            findings: self.findings,
            timeouts: self.clients.timeouts(),
            evictions,
            unanswered_at_end: self.clients.unanswered() as u64,
            servers: self.clients.servers(),
            lookups: self.lookups.as_ref().map(Lookups::summary),
        }
    }

    fn run_due(&mut self, out: &mut Vec<Finding>) {
        let start = out.len();
        let mut fed = false;
        while let Some(obs) = self.reorder.pop_due() {
            self.feed(&obs, out);
            fed = true;
        }
        // A capture's reader and the kernel's ring buffer tell the time after every batch of
        // packets, often the time they were last told: a tick then would find nothing to do.
        if let Some(horizon) = self.reorder.horizon() {
            if fed || self.ticked != Some(horizon) {
                self.ticked = Some(horizon);
                self.tell_time(horizon, out);
            }
        }
        self.explain_timeouts(&mut out[start..]);
        self.clients.failures_behind(&out[start..]);
        self.findings.count(&out[start..]);
    }

    /// Says in each timeout among `findings` where the kernel dropped its query, if it did.
    fn explain_timeouts(&self, findings: &mut [Finding]) {
        for finding in findings {
            if let Finding::Timeout(timeout) = finding {
                self.drops.explain(timeout);
            }
        }
    }

    /// The loops first, so that a timeout is judged knowing every loop found by then.
    fn feed(&mut self, obs: &Observation, out: &mut Vec<Finding>) {
        let message = MessageKey::of(obs);
        if !obs.recalled {
            self.fragments.observe(obs);
        }
        if !obs.recalled && (!obs.partial || self.loops.takes_partial()) {
            self.loops.observe(obs, message.as_ref(), out);
        }
        // The clients' view judges a query from where its client sent it.
        if !obs.partial {
            let answered = self
                .clients
                .observe_with(obs, message.as_ref(), &mut self.loops, out);
            if let (Some(lookups), Some(query), Some(message)) =
                (&mut self.lookups, answered, &message)
            {
                lookups.answered(message, query, obs);
            }
        }
    }

    fn tell_time(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.fragments.tick(now, out);
        self.loops.tick(now, out);
        self.clients.tick_with(now, &mut self.loops, out);
        if let Some(lookups) = &mut self.lookups {
            lookups.tick(now, &self.loops, out);
        }
    }
}

/// How the timeout judgement asks the loop analyzer.
impl Loops for ForwardingLoops {
    fn unanswered_in_loop(&mut self, question: &QuestionKey, sent: SystemTime) -> bool {
        let looping = self.is_looping(question, sent);
        if looping {
            self.count_unanswered(question);
        }
        looping
    }
}

#[cfg(test)]
mod tests;
