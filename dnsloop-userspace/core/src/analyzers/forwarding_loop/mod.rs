//! Forwarding loops: a question that re-enters a namespace along a chain of forwards.
//!
//! Nothing about a single packet shows a loop: CoreDNS and node-local-dns give every upstream
//! query a new id and send it from an address they do not listen on, a ClusterIP stands for a
//! pod, and 127.0.0.1 exists in every namespace. What does show it is the path of a question:
//!
//! 1. Each query message is followed across the node as a *flight* (see [`MessageKey`] for what
//!    identifies it at every hop). A flight that enters a namespace and does not leave it again
//!    within `settle` was delivered there, if it was addressed to the namespace and the kernel
//!    did not drop it there; one that leaves sooner was routed through. One that stayed
//!    without being taken in (a forward held for a neighbour that never answers ARP, a query
//!    to a port nobody listens on) is stranded: no server there got it, so it can be no link
//!    in a loop.
//! 2. A flight that leaves namespace M without having entered it was sent by M. If M was
//!    delivered the same question within `forward_window` before and had not answered it yet,
//!    M forwarded that query: it becomes the new flight's parent.
//! 3. A flight that comes onto the node from an unwatched side, soon after a query for the same
//!    question left the node over that same device unanswered, is taken as that query coming
//!    back from other nodes: it becomes the new flight's parent (see `returning`).
//! 4. When a flight is delivered, its chain of parents is searched for a cycle ([`cycle::find`]).
//!
//! The analyzer sees only queries' paths, and replies only to learn that a namespace answered
//! a query (so that it no longer forwards it).
mod cycle;
mod describe;
mod flight;
mod latest;
mod storm;
#[cfg(test)]
mod tests;

use std::{
    collections::VecDeque,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::Probe;

pub use self::flight::{Flight, FlightId};
use self::{
    describe::LoopKey,
    flight::Flights,
    latest::LatestFlights,
    storm::{Storms, Window},
};
use super::{
    has_waited,
    packet::{MessageKey, QuestionKey},
    repeats::{Repeated, Repeats},
    table::{FastHash, Table},
    waited_by, Analyzer,
};
use crate::{
    finding::{Finding, LoopFinding},
    observation::{Namespace, Observation, Question},
    present::names::Names,
};

/// A busy question is delivered to many namespaces; its parent is looked for among the most
/// recent deliveries only.
const RECENT_DELIVERIES: usize = 16;

/// Queries for one question that left the node, kept to match a return against.
const RECENT_DEPARTURES: usize = 16;

/// How soon after a query left the node a question coming back onto it can be that query
/// coming back. A round through other nodes' forwarders takes milliseconds; a client on another
/// node asking again takes a resolver timeout (a second at least).
const RETURN_WINDOW: Duration = Duration::from_millis(500);

/// How soon after a namespace was delivered a question it had asked itself a query for it
/// from there is still its forward of that question, not its own client asking again: a
/// forwarder sends on within milliseconds, and no resolver retries in under a second (the
/// least `timeout` resolv.conf takes).
const FORWARD_BEFORE_A_RETRY: Duration = Duration::from_millis(500);

/// A query that left the node over `ifname` at `at`, unless it turns up again.
struct Departure {
    at: SystemTime,
    flight: FlightId,
    ifname: Arc<str>,
}

/// A flight that was delivered to `namespace` at `since`. A delivered flight stays where it
/// is, so the namespace is kept here too: most deliveries of a busy question are to another
/// namespace than a new query's sender, and are passed over without looking up their flight.
struct Delivery {
    since: SystemTime,
    flight: FlightId,
    namespace: Namespace,
}

pub struct ForwardingLoops {
    settle: Duration,
    forward_window: Duration,
    flights: Flights,
    /// The newest flight of each message, to attach its next sighting to.
    latest: LatestFlights,
    /// Flights that entered a namespace, by entry time, until `settle` decides their fate.
    entered: VecDeque<(SystemTime, FlightId)>,
    entered_capacity: usize,
    entered_overflows: u64,
    /// The latest deliveries of each question: where a new query's parent is looked for.
    deliveries: Table<QuestionKey, VecDeque<Delivery>, FastHash>,
    /// The latest queries of each question seen leaving for an unwatched side: where a
    /// question coming back onto the node finds the query it may be.
    departures: Table<QuestionKey, VecDeque<Departure>, FastHash>,
    /// The flight that sent each loop probe.
    probes: Table<QuestionKey, FlightId, FastHash>,
    /// Queries the kernel dropped, with where (if known) and when: a flight that stays where
    /// its message was dropped was not taken in there. Drops come apart from the packets, and
    /// may come before the sighting of the packet they end.
    drops: Table<MessageKey, (Option<Namespace>, SystemTime), FastHash>,
    /// When each question was last sent out of each namespace (see `cycle::SentOut`). The
    /// question carries its keyed hash and the node names its namespaces, so no packet chooses
    /// where a key lands: `FastHash`.
    sent_out: Table<(QuestionKey, Namespace), SystemTime, FastHash>,
    /// When each namespace last asked each question itself: sent a query for it that was no
    /// forward of one it had taken in (a client there, beside a server or not).
    asked: Table<(QuestionKey, Namespace), SystemTime, FastHash>,
    reports: Repeats<LoopKey, LoopFinding>,
    /// Each question's storms at each interface, for a loop whose path is out of sight.
    storms: Storms,
    next_id: FlightId,
    /// How its findings write the question's name.
    names: Names,
}

impl ForwardingLoops {
    pub fn new(
        settle: Duration,
        forward_window: Duration,
        report_interval: Duration,
        capacity: usize,
        names: Names,
    ) -> Self {
        Self {
            settle,
            forward_window,
            flights: Flights::with_hasher(capacity),
            latest: LatestFlights::new(capacity),
            entered: VecDeque::new(),
            entered_capacity: capacity.max(1),
            entered_overflows: 0,
            deliveries: Table::with_hasher(capacity),
            departures: Table::with_hasher(capacity),
            probes: Table::with_hasher(capacity),
            drops: Table::with_hasher(capacity),
            sent_out: Table::with_hasher(capacity),
            asked: Table::with_hasher(capacity),
            reports: Repeats::new(report_interval, capacity),
            storms: Storms::new(capacity),
            next_id: FlightId::MIN,
            names,
        }
    }

    /// How long a flight is kept after it was last seen or used: it can be a parent for
    /// `forward_window` after its delivery, which is decided `settle` after it arrived. Being
    /// linked as a parent, or reported in a cycle, keeps it (and so its chain) longer.
    fn retention(&self) -> Duration {
        self.forward_window.saturating_add(self.settle)
    }

    fn query(&mut self, obs: &Observation, message: &MessageKey, out: &mut Vec<Finding>) {
        let Some(question) = obs.question.as_ref() else {
            return;
        };
        self.storms.query(&message.question, obs);
        if let Some(left) = &obs.point.leaves {
            if obs.point.enters.as_ref() != Some(left) {
                self.sent_out
                    .insert((message.question.clone(), left.clone()), obs.ts);
            }
        }
        let moving = self
            .latest
            .get(message, &self.flights)
            .filter(|(_, flight)| flight.continues_with(obs, self.settle))
            .map(|(id, _)| id);
        let id = match moving {
            Some(id) => {
                if let Some(flight) = self.flights.refresh(&id) {
                    flight.advance(obs);
                }
                id
            }
            None => {
                let id = self.start_flight(message.clone(), question.clone(), obs);
                if obs.point.leaves.is_none() {
                    let returning = self.returning(&message.question, obs);
                    if let Some(flight) = self.flights.get_mut(&id) {
                        flight.returning = returning;
                    }
                }
                id
            }
        };
        if obs.point.enters.is_some() {
            self.note_entry(obs.ts, id, out);
        } else if obs.point.leaves.is_some() {
            self.note_departure(&message.question, obs, id);
        }
    }

    /// `flight` was seen leaving for an unwatched side in `obs`: off the node, unless it is
    /// seen again (a bridge's ports).
    fn note_departure(&mut self, question: &QuestionKey, obs: &Observation, flight: FlightId) {
        let departure = Departure {
            at: obs.ts,
            flight,
            ifname: Arc::clone(&obs.point.ifname),
        };
        push_recent(&mut self.departures, question, departure, RECENT_DEPARTURES);
    }

    fn start_flight(
        &mut self,
        message: MessageKey,
        question: Question,
        obs: &Observation,
    ) -> FlightId {
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        if obs.probe != Probe::None
            && obs.point.leaves.is_some()
            && self.probes.get(&message.question).is_none()
        {
            self.probes.insert(message.question.clone(), id);
        }
        self.latest.insert(&message, id);
        self.flights
            .insert(id, Flight::start(message, question, obs));
        id
    }

    fn note_entry(&mut self, since: SystemTime, id: FlightId, out: &mut Vec<Finding>) {
        self.entered.push_back((since, id));
        if self.entered.len() > self.entered_capacity {
            // Decided before its time: a transit may be taken for a delivery.
            self.entered_overflows += 1;
            if let Some((since, id)) = self.entered.pop_front() {
                self.deliver(since, id, out);
            }
        }
    }

    /// A reply leaving the namespace a flight was delivered to: that namespace answered it. A
    /// reply to a flight that left the node was answered out of sight.
    fn reply(&mut self, obs: &Observation, message: &MessageKey) {
        self.storms.reply(&message.question, &obs.point.ifname);
        let Some((id, _)) = self.latest.get(message, &self.flights) else {
            return;
        };
        if let Some(flight) = self.flights.get_mut(&id) {
            let answered_there = obs
                .point
                .leaves
                .as_ref()
                .is_some_and(|leaves| flight.is_in(leaves));
            if answered_there || flight.departure().is_some() {
                flight.answered.get_or_insert(obs.ts);
            }
        }
    }

    /// Entries dropped from its full tables so far.
    pub fn evictions(&self) -> u64 {
        self.flights.evictions()
            + self.latest.evictions()
            + self.deliveries.evictions()
            + self.departures.evictions()
            + self.sent_out.evictions()
            + self.asked.evictions()
            + self.probes.evictions()
            + self.drops.evictions()
            + self.reports.evictions()
            + self.storms.evictions()
            + self.entered_overflows
    }

    /// Decides every flight that entered a namespace at least `settle` before `now`.
    fn settle_until(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        while let Some(&(since, id)) = self.entered.front() {
            if !has_waited(since, self.settle, now) {
                break;
            }
            self.entered.pop_front();
            self.deliver(since, id, out);
        }
    }

    /// The kernel dropped the query `message` at `at`, in `namespace` if known.
    pub fn dropped(&mut self, message: MessageKey, namespace: Option<Namespace>, at: SystemTime) {
        self.drops.insert(message, (namespace, at));
    }

    /// Whether the kernel dropped `flight`'s message in the namespace it sits in, at or after
    /// `since`, when it entered there.
    fn dropped_since(&self, flight: &Flight, since: SystemTime) -> bool {
        self.drops
            .get(&flight.message)
            .is_some_and(|(namespace, at)| {
                *at >= since && namespace.as_ref().is_none_or(|there| flight.is_in(there))
            })
    }

    /// The flight `id` entered a namespace at `since` and stayed: if it was taken in there,
    /// link it to the query it forwards, and look for the cycle it closes.
    fn deliver(&mut self, since: SystemTime, id: FlightId, out: &mut Vec<Finding>) {
        let dropped = self
            .flights
            .get(&id)
            .is_some_and(|flight| self.dropped_since(flight, since));
        let Some(flight) = self.flights.get_mut(&id) else {
            return;
        };
        if !flight.settle(since, dropped) {
            return;
        }
        let question = flight.message.question.clone();
        let Some((namespace, _)) = flight.delivered_to() else {
            return;
        };
        let delivery = Delivery {
            since,
            flight: id,
            namespace: namespace.clone(),
        };
        let parent = self
            .parent_of(id, since)
            .or_else(|| self.came_back_as(id, since));
        if let Some(flight) = self.flights.get_mut(&id) {
            flight.parent = parent;
            if let (None, None, Some(sender)) = (parent, flight.returning, flight.origin()) {
                let key = (question.clone(), sender.clone());
                let started = flight.started();
                if !self.asked_within(&key, started) {
                    self.asked.insert(key, started);
                }
            }
        }
        self.remember_delivery(question.clone(), delivery);
        let probe_origin = self.probes.get(&question).copied();
        let sent_out = SentOutOf {
            table: &self.sent_out,
            question: &question,
        };
        if let Some(cycle) = cycle::find(&self.flights, id, probe_origin, &sent_out) {
            self.report(question, &cycle, since, out);
        }
    }

    fn remember_delivery(&mut self, question: QuestionKey, delivery: Delivery) {
        push_recent(&mut self.deliveries, &question, delivery, RECENT_DELIVERIES);
    }

    /// The query the sender of flight `id` was delivered within `forward_window` before it
    /// sent `id`, and still owed the answer to: the latest such one. Called at `now`, when `id`
    /// is delivered, by which time every query delivered before it was sent has been decided.
    fn parent_of(&mut self, id: FlightId, now: SystemTime) -> Option<FlightId> {
        let parent = self.sent_as_forward_of(id)?;
        self.touch(parent, now);
        Some(parent)
    }

    /// Whether the namespace in `key` asked the question in it itself (see `asked`) within
    /// `forward_window` before `at`: the first time it did, of those.
    fn asked_within(&self, key: &(QuestionKey, Namespace), at: SystemTime) -> bool {
        self.asked.get(key).is_some_and(|asked| {
            at.duration_since(*asked)
                .is_ok_and(|ago| ago <= self.forward_window)
        })
    }

    /// `parent_of`, without keeping the parent any longer. Where the sender asked the question
    /// itself within `forward_window`, a query it sent later than `FORWARD_BEFORE_A_RETRY`
    /// after a delivery may be its own client asking again: then it is no forward of that one.
    fn sent_as_forward_of(&self, id: FlightId) -> Option<FlightId> {
        let child = self.flights.get(&id)?;
        let sender = child.origin()?;
        let window = if self.asked_within(
            &(child.message.question.clone(), sender.clone()),
            child.started(),
        ) {
            FORWARD_BEFORE_A_RETRY
        } else {
            self.forward_window
        };
        let forwarded_as_child = |delivery: &Delivery| {
            let to_sender = delivery.namespace == *sender;
            let in_time = || {
                child
                    .started()
                    .duration_since(delivery.since)
                    .is_ok_and(|gap| gap <= window)
            };
            let still_owed = || {
                self.flights.get(&delivery.flight).is_some_and(|parent| {
                    parent
                        .answered
                        .is_none_or(|answered| answered > child.started())
                })
            };
            to_sender && in_time() && still_owed()
        };
        Some(
            self.deliveries
                .get(&child.message.question)?
                .iter()
                .rev()
                .find(|&delivery| forwarded_as_child(delivery))?
                .flight,
        )
    }

    /// The latest flight `message` was followed as: the one its replies answer.
    pub fn latest_flight(&self, message: &MessageKey) -> Option<(FlightId, &Flight)> {
        self.latest.get(message, &self.flights)
    }

    /// The query that flight `id` forwards: its parent, linked when it was delivered; for one
    /// that left for an unwatched side (to an upstream beyond the uplink), and so was never
    /// delivered here, the query its sender owed the answer to when it sent it, found as a
    /// delivered flight's parent is. Asked once every delivery up to the flight's answer has
    /// been decided (`settle` after it), so that its parent's is too.
    pub fn forwarded_from(&self, id: FlightId) -> Option<FlightId> {
        let flight = self.flights.get(&id)?;
        match flight.parent {
            Some(parent) => Some(parent),
            None if flight.delivered_to().is_none() => self.sent_as_forward_of(id),
            None => None,
        }
    }

    /// The query that a question coming onto the node from an unwatched side in `obs` may be
    /// coming back as: the latest one for the same question that left the node over the device
    /// it arrives by, no more than `RETURN_WINDOW` before, unanswered, and not seen since.
    /// Looked for as it arrives, while that query's departure is among the latest; whether it
    /// really came back is for `cycle::find` to judge, from rounds.
    fn returning(&self, question: &QuestionKey, obs: &Observation) -> Option<FlightId> {
        let went_back_out = |departure: &Departure| {
            let in_time = obs
                .ts
                .duration_since(departure.at)
                .is_ok_and(|gap| gap <= RETURN_WINDOW);
            let still_away = || {
                self.flights.get(&departure.flight).is_some_and(|sent| {
                    sent.departure().is_some_and(|hop| hop.ts == departure.at)
                        && sent.answered.is_none()
                })
            };
            departure.ifname == obs.point.ifname && in_time && still_away()
        };
        Some(
            self.departures
                .get(question)?
                .iter()
                .rev()
                .find(|&departure| went_back_out(departure))?
                .flight,
        )
    }

    /// The query that flight `id` came back onto the node as, once `id` is delivered (see
    /// `returning`). That query was never delivered here, where parents are found: its own is
    /// found now, to follow the chain on.
    fn came_back_as(&mut self, id: FlightId, now: SystemTime) -> Option<FlightId> {
        let sent = self.flights.get(&id)?.returning?;
        let sent_flight = self.flights.get(&sent)?;
        if sent_flight.parent.is_none() {
            let parent = self.parent_of(sent, now);
            if let Some(sent_flight) = self.flights.get_mut(&sent) {
                sent_flight.parent = parent;
            }
        }
        self.touch(sent, now);
        Some(sent)
    }

    /// Keeps flight `id` for another `retention` from `now`.
    fn touch(&mut self, id: FlightId, now: SystemTime) {
        if let Some(flight) = self.flights.refresh(&id) {
            flight.active = flight.active.max(now);
        }
    }

    fn report(
        &mut self,
        question: QuestionKey,
        cycle: &cycle::Cycle,
        at: SystemTime,
        out: &mut Vec<Finding>,
    ) {
        for &id in &cycle.flights {
            self.touch(id, at);
        }
        let flights: Vec<&Flight> = cycle
            .flights
            .iter()
            .filter_map(|id| self.flights.get(id))
            .collect();
        let key = LoopKey::new(
            question,
            flights.iter().any(|flight| flight.came_back()),
            !describe::unconfirmed(&flights).is_empty(),
        );
        let finding = self.reports.occurred_after(key, at, cycle.rounds - 1, || {
            describe::loop_finding(&flights, cycle.rounds, at, &self.names)
        });
        out.extend(finding.map(Finding::Loop));
    }

    /// Reports the storms of `windows` that show a possible loop, unless the question's loop
    /// was reported since the storm began: its path was seen, and says more.
    fn report_storms(
        &mut self,
        windows: Vec<(QuestionKey, Window)>,
        at: SystemTime,
        out: &mut Vec<Finding>,
    ) {
        for (question, window) in windows {
            let cycle_reported = [(false, false), (true, false), (false, true), (true, true)]
                .into_iter()
                .any(|(through_other_nodes, possible)| {
                    let key = LoopKey::new(question.clone(), through_other_nodes, possible);
                    self.reports
                        .last_occurred(&key)
                        .is_some_and(|last| last >= window.start())
                });
            if cycle_reported {
                continue;
            }
            if let Some((key, found)) = window.possible_loop(at, &self.names) {
                let reported = self.reports.occurred_after(key, at, 0, || Some(found));
                out.extend(reported.map(Finding::Loop));
            }
        }
    }

    /// Forgets flights, and what points at them, once they are too old to matter.
    fn expire(&mut self, now: SystemTime) {
        let stale = waited_by(self.retention(), now);
        while let Some((id, flight)) = self
            .flights
            .pop_stalest_if(|_, flight| stale(flight.active))
        {
            self.latest.forget(&flight.message, id);
        }
        // Flights evicted from a full table leave references behind; they go once stalest.
        let gone = |id: &FlightId| self.flights.get(id).is_none();
        self.latest.forget_stalest_gone(&self.flights);
        while self.probes.pop_stalest_if(|_, id| gone(id)).is_some() {}
        while self.drops.pop_stalest_if(|_, &(_, at)| stale(at)).is_some() {}
        while self
            .sent_out
            .pop_stalest_if(|_, &last| stale(last))
            .is_some()
        {}
        while self
            .deliveries
            .pop_stalest_if(|_, recent| recent.back().is_none_or(|last| stale(last.since)))
            .is_some()
        {}
        while self
            .departures
            .pop_stalest_if(|_, recent| recent.back().is_none_or(|last| stale(last.at)))
            .is_some()
        {}
    }

    /// Whether `question` is caught in a loop that was reported and still went round within
    /// `retention` of `at`.
    pub fn is_looping(&self, question: &QuestionKey, at: SystemTime) -> bool {
        self.latest_report_of(question)
            .is_some_and(|(_, last)| !has_waited(last, self.retention(), at))
    }

    /// Counts a query of `question` that went unanswered, for its loop's next report.
    pub fn count_unanswered(&mut self, question: &QuestionKey) {
        if let Some((key, _)) = self.latest_report_of(question) {
            self.reports.amend(&key, |found| found.unanswered += 1);
        }
    }

    /// The report of `question`'s loop that went round last (its rounds on the node alone and
    /// through other nodes are reported apart), and when. A possible loop's unanswered queries
    /// are timeouts: it may be none.
    fn latest_report_of(&self, question: &QuestionKey) -> Option<(LoopKey, SystemTime)> {
        [false, true]
            .into_iter()
            .filter_map(|through_other_nodes| {
                let key = LoopKey::new(question.clone(), through_other_nodes, false);
                let last = self.reports.last_occurred(&key)?;
                Some((key, last))
            })
            .max_by_key(|(_, last)| *last)
    }
}

/// Appends `item` to `question`'s latest items in `table`, keeping at most `capacity`.
fn push_recent<T>(
    table: &mut Table<QuestionKey, VecDeque<T>, FastHash>,
    question: &QuestionKey,
    item: T,
    capacity: usize,
) {
    let Some(recent) = table.refresh(question) else {
        table.insert(question.clone(), VecDeque::from([item]));
        return;
    };
    if recent.len() == capacity {
        recent.pop_front();
    }
    recent.push_back(item);
}

/// `cycle::SentOut` for one question.
struct SentOutOf<'a> {
    table: &'a Table<(QuestionKey, Namespace), SystemTime, FastHash>,
    question: &'a QuestionKey,
}

impl cycle::SentOut for SentOutOf<'_> {
    fn sent_out_since(&self, namespace: &Namespace, since: SystemTime) -> bool {
        self.table
            .get(&(self.question.clone(), namespace.clone()))
            .is_some_and(|&last| last >= since)
    }
}

impl Analyzer for ForwardingLoops {
    /// A query seen mid-path still shows where it went, which is what a chain needs.
    fn takes_partial(&self) -> bool {
        true
    }

    fn observe(&mut self, obs: &Observation, message: Option<&MessageKey>, out: &mut Vec<Finding>) {
        self.tick(obs.ts, out);
        let Some(message) = message else {
            return;
        };
        if obs.is_response {
            self.reply(obs, message);
        } else {
            self.query(obs, message, out);
        }
    }

    fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.settle_until(now, out);
        let ended = self.storms.ended(now);
        self.report_storms(ended, now, out);
        self.expire(now);
    }

    fn finish(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        // Nothing more will arrive: whatever entered a namespace stays there.
        while let Some((since, id)) = self.entered.pop_front() {
            self.deliver(since, id, out);
        }
        let unfinished = self.storms.drain();
        self.report_storms(unfinished, now, out);
        self.expire(now);
        out.extend(self.reports.unreported().map(Finding::Loop));
    }
}

impl Repeated for LoopFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        self.count = count;
        self.ts = last;
    }
}
