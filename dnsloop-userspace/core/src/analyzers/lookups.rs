//! Lookups: a client's query and the chain of forwards it caused on the node (pod -> cache ->
//! ClusterIP -> CoreDNS pod -> upstream), with the time spent at each, so that a slow answer
//! names the hop that was slow.
//!
//! Nothing here follows packets. The client view (`outstanding`) matches every query, the
//! client's and each forward alike, to the reply that came back to its sender; the
//! forwarding-loop analyzer has followed each query as a flight and linked every forward to
//! the query it forwards. An answered query waits `settle`, by when every delivery up to its
//! answer has been decided and with it the link, then joins the lookup of the client's query
//! at the root of its chain. The client's query is answered after its forwards, and closes its
//! lookup.
//!
//! A forward is placed as the loop analyzer links it: under the latest query of the same
//! question its sender was delivered and still owed. When several clients ask a server the
//! same name at once and it forwards the question once, that one forward is placed under the
//! last of them; the others are lookups answered from the server itself.
use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use super::{
    forwarding_loop::{Flight, FlightId, ForwardingLoops},
    has_waited,
    histogram::Histogram,
    outstanding::SentQuery,
    packet::MessageKey,
    table::{FastHash, Table},
};
use crate::{
    finding::{Finding, LookupFinding, LookupHop},
    observation::{Observation, Question},
    present::{mnemonic, names::Names},
};

/// Queries a lookup keeps, the client's included; later forwards are counted, not kept. A
/// lookup takes 2 to 4 on a node.
const MAX_HOPS: usize = 16;

/// The longest chain of forwards followed back to the client's query: one longer is a loop.
const MAX_CHAIN: usize = 16;

/// Slow lookups written per second of packet time, at most; the rest are counted.
const REPORTS_PER_SECOND: u32 = 10;

/// Servers whose hops' times are kept for the summary; past this many, the least recently
/// used is dropped.
const MAX_SERVERS: usize = 256;

pub struct Lookups {
    slow: Duration,
    settle: Duration,
    /// How long forwards wait for their client's query to be answered: the client view waits
    /// no longer for it.
    wait: Duration,
    /// Queries answered, in the order they were, until `settle` has passed.
    answered: VecDeque<Answered>,
    answered_capacity: usize,
    answered_overflows: u64,
    /// Forwards answered, under the flight of the client's query they serve.
    pending: Table<FlightId, Pending, FastHash>,
    /// The time spent at each server's hops.
    servers: Table<SocketAddr, Histogram>,
    reports: ReportRate,
    counts: LookupCounts,
    names: Names,
}

/// A query whose reply came back to its sender at `at`.
struct Answered {
    at: SystemTime,
    message: MessageKey,
    query: SentQuery,
    rcode: u16,
}

/// The forwards of one client's query answered so far.
#[derive(Default)]
struct Pending {
    forwards: Vec<Forward>,
    left_out: u64,
    /// When the latest was added.
    last: Option<SystemTime>,
}

struct Forward {
    /// The flights of the queries it forwards, the one it forwards first: the nearest one
    /// answered is its parent in the lookup.
    ancestors: Vec<FlightId>,
    flight: FlightId,
    hop: LookupHop,
}

/// What the lookups followed amounted to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupCounts {
    /// Client queries answered and followed through their forwards.
    pub followed: u64,
    /// Of those, the ones answered `--slow` or later.
    pub slow: u64,
    /// Slow lookups written.
    pub reported: u64,
    /// Slow lookups not written, past the most a second.
    pub suppressed: u64,
    /// Answered queries that could not be placed in a lookup: their flight was forgotten, or
    /// their chain of forwards was longer than any lookup's (a loop).
    pub unlinked: u64,
}

/// The time spent at one server's hops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HopTimes {
    /// As its senders addressed it.
    pub server: SocketAddr,
    pub hops: u64,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// The summary's part on lookups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupSummary {
    pub slow: Duration,
    pub counts: LookupCounts,
    /// In address order.
    pub servers: Vec<HopTimes>,
}

impl Lookups {
    /// Lookups answered `slow` or later are reported; queries are linked `settle` after their
    /// answer, and forwards wait `wait` for their client's query's. Every table holds at most
    /// `capacity` entries.
    pub fn new(
        slow: Duration,
        settle: Duration,
        wait: Duration,
        capacity: usize,
        names: Names,
    ) -> Self {
        Self {
            slow,
            settle,
            wait,
            answered: VecDeque::new(),
            answered_capacity: capacity.max(1),
            answered_overflows: 0,
            pending: Table::with_hasher(capacity),
            servers: Table::new(MAX_SERVERS.min(capacity)),
            reports: ReportRate::default(),
            counts: LookupCounts::default(),
            names,
        }
    }

    /// `reply`, the message `message`, answered `query` where it was sent from.
    pub fn answered(&mut self, message: &MessageKey, query: SentQuery, reply: &Observation) {
        if self.answered.len() == self.answered_capacity {
            self.answered.pop_front();
            self.answered_overflows += 1;
        }
        self.answered.push_back(Answered {
            at: reply.ts,
            message: message.clone(),
            query,
            rcode: reply.rcode,
        });
    }

    /// Time has reached `now`, and `loops` has decided every delivery up to `now - settle`:
    /// places the queries answered by then.
    pub fn tick(&mut self, now: SystemTime, loops: &ForwardingLoops, out: &mut Vec<Finding>) {
        while let Some(answered) = self.answered.front() {
            if !has_waited(answered.at, self.settle, now) {
                break;
            }
            if let Some(answered) = self.answered.pop_front() {
                self.place(answered, loops, out);
            }
        }
        let stale = self.wait.saturating_add(self.settle.saturating_mul(2));
        while self
            .pending
            .pop_stalest_if(|_, pending| {
                pending.last.is_none_or(|last| has_waited(last, stale, now))
            })
            .is_some()
        {}
    }

    /// The input has ended, and `loops` has decided every delivery: places every query
    /// answered.
    pub fn finish(&mut self, loops: &ForwardingLoops, out: &mut Vec<Finding>) {
        while let Some(answered) = self.answered.pop_front() {
            self.place(answered, loops, out);
        }
    }

    pub fn summary(&self) -> LookupSummary {
        let mut servers: Vec<HopTimes> = self
            .servers
            .iter()
            .map(|(&server, own)| HopTimes {
                server,
                hops: own.count(),
                p50: own.quantile(0.50),
                p90: own.quantile(0.90),
                p99: own.quantile(0.99),
                max: own.max(),
            })
            .collect();
        servers.sort_by_key(|times| times.server);
        LookupSummary {
            slow: self.slow,
            counts: self.counts,
            servers,
        }
    }

    /// Entries dropped from its full tables so far.
    pub fn evictions(&self) -> u64 {
        self.answered_overflows + self.pending.evictions() + self.servers.evictions()
    }

    /// Adds `answered` to the lookup it belongs to, or closes the lookup it is the client's
    /// query of.
    fn place(&mut self, answered: Answered, loops: &ForwardingLoops, out: &mut Vec<Finding>) {
        let Some((flight_id, flight)) = loops.latest_flight(&answered.message) else {
            self.counts.unlinked += 1;
            return;
        };
        let hop = hop_of(&answered, flight);
        let Some(parent) = loops.forwarded_from(flight_id) else {
            // Asked from an unwatched side (another node): not followed from its client.
            let pending = self.pending.remove(&flight_id);
            if hop.from.is_some() {
                let question = &answered.query.question;
                self.close(flight_id, hop, question, pending.unwrap_or_default(), out);
            }
            return;
        };
        let mut ancestors = vec![parent];
        while let Some(next) = loops.forwarded_from(ancestors[ancestors.len() - 1]) {
            if ancestors.len() == MAX_CHAIN {
                self.counts.unlinked += 1;
                return;
            }
            ancestors.push(next);
        }
        let root = ancestors[ancestors.len() - 1];
        let forward = Forward {
            ancestors,
            flight: flight_id,
            hop,
        };
        if self.pending.get(&root).is_none() {
            self.pending.insert(root, Pending::default());
        }
        let Some(pending) = self.pending.refresh(&root) else {
            return;
        };
        pending.last = Some(answered.at);
        if pending.forwards.len() + 1 < MAX_HOPS {
            pending.forwards.push(forward);
        } else {
            pending.left_out += 1;
        }
    }

    /// The client's query `client`, flight `flight`, was answered: its lookup is complete.
    fn close(
        &mut self,
        flight: FlightId,
        client: LookupHop,
        question: &Question,
        mut pending: Pending,
        out: &mut Vec<Finding>,
    ) {
        pending.forwards.sort_by_key(|forward| forward.hop.sent);
        let mut flights = vec![flight];
        let mut hops = vec![client];
        for forward in pending.forwards {
            let mut hop = forward.hop;
            hop.forwards = forward
                .ancestors
                .iter()
                .find_map(|ancestor| flights.iter().position(|known| known == ancestor));
            flights.push(forward.flight);
            hops.push(hop);
        }
        set_own_times(&mut hops);
        for hop in &hops {
            match self.servers.refresh(&hop.server) {
                Some(own) => own.record(hop.own),
                None => {
                    let mut own = Histogram::new();
                    own.record(hop.own);
                    self.servers.insert(hop.server, own);
                }
            }
        }
        self.counts.followed += 1;
        if hops[0].latency() < self.slow {
            return;
        }
        self.counts.slow += 1;
        let ts = hops[0].answered;
        if !self.reports.due(ts) {
            self.counts.suppressed += 1;
            return;
        }
        self.counts.reported += 1;
        let slowest = hops
            .iter()
            .enumerate()
            .max_by_key(|(_, hop)| hop.own)
            .map_or(0, |(index, _)| index);
        let mut found = LookupFinding {
            ts,
            qname: question.name.presented(&self.names),
            qtype: question.qtype,
            hops,
            slowest,
            hops_left_out: pending.left_out,
            summary: String::new(),
        };
        found.summary = summary(&found);
        out.push(Finding::Lookup(found));
    }
}

/// `answered` as a hop of a lookup, with what following it as `flight` told.
fn hop_of(answered: &Answered, flight: &Flight) -> LookupHop {
    let query = &answered.query;
    let (to, backend) = match flight.delivered_to() {
        Some((namespace, at)) => (Some(namespace.clone()), (query.server != at).then_some(at)),
        None => (None, None),
    };
    LookupHop {
        from: query.client_namespace.clone(),
        src: query.client.into(),
        server: query.server.into(),
        backend,
        to,
        via: flight.departure().map(|hop| Arc::clone(&hop.point.ifname)),
        id: query.id,
        transport: answered.message.transport,
        sent: query.sent,
        answered: answered.at,
        rcode: answered.rcode,
        forwards: None,
        own: Duration::ZERO,
    }
}

/// Sets each hop's own time: its latency less the time at least one of its forwards was
/// awaited (forwards sent at once, or a retry over another, overlap).
fn set_own_times(hops: &mut [LookupHop]) {
    for index in 0..hops.len() {
        let (start, end) = (hops[index].sent, hops[index].answered);
        let mut awaited: Vec<(SystemTime, SystemTime)> = hops
            .iter()
            .filter(|hop| hop.forwards == Some(index))
            .map(|hop| (hop.sent.clamp(start, end), hop.answered.clamp(start, end)))
            .collect();
        awaited.sort();
        let mut covered = Duration::ZERO;
        let mut reached = start;
        for (from, to) in awaited {
            let from = from.max(reached);
            if to > from {
                covered += to.duration_since(from).unwrap_or_default();
                reached = to;
            }
        }
        hops[index].own = hops[index].latency().saturating_sub(covered);
    }
}

/// The lookup in one sentence: who waited how long for what, and where the time went.
pub fn summary(found: &LookupFinding) -> String {
    let client = found.client_query();
    let slow = &found.hops[found.slowest];
    let asker = client
        .from
        .as_ref()
        .map_or_else(|| client.src.to_string(), ToString::to_string);
    format!(
        "{asker} waited {} for {} {} ({}); the slowest hop: {} -> {}, {} of it",
        millis(client.latency()),
        found.qname,
        mnemonic::qtype(found.qtype),
        mnemonic::rcode(client.rcode),
        slow.from
            .as_ref()
            .map_or_else(|| slow.src.to_string(), ToString::to_string),
        destination(slow),
        millis(slow.own),
    )
}

/// Where a hop went: `10.96.0.10:53 (DNAT -> 10.244.0.3:53, pod 10.244.0.3)`, `10.255.0.53:53
/// (off the node via eth0)`.
pub fn destination(hop: &LookupHop) -> String {
    let mut notes = Vec::new();
    if let Some(backend) = hop.backend {
        notes.push(format!("DNAT -> {backend}"));
    }
    match (&hop.to, &hop.via) {
        (Some(namespace), _) => notes.push(namespace.to_string()),
        (None, Some(via)) => notes.push(format!("off the node via {via}")),
        (None, None) => {}
    }
    if notes.is_empty() {
        hop.server.to_string()
    } else {
        format!("{} ({})", hop.server, notes.join(", "))
    }
}

/// A duration in milliseconds, to a tenth.
fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// Lets at most `REPORTS_PER_SECOND` reports through per second of packet time.
#[derive(Default)]
struct ReportRate {
    /// When the current second began, and the reports let through in it.
    second: Option<(SystemTime, u32)>,
}

impl ReportRate {
    /// Whether a report at `ts` is due; if so, it counts as written.
    fn due(&mut self, ts: SystemTime) -> bool {
        let (start, written) = match self.second {
            Some((start, written)) if !has_waited(start, Duration::from_secs(1), ts) => {
                (start, written)
            }
            _ => (ts, 0),
        };
        let due = written < REPORTS_PER_SECOND;
        self.second = Some((start, written + u32::from(due)));
        due
    }
}

#[cfg(test)]
mod tests;
