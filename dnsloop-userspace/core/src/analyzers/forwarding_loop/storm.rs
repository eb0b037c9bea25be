//! A question going round out of sight. Some captures cannot show a loop's path: one of a single
//! interface shows the question cross it, not the namespaces it goes round. What they do show
//! is its storm: the question crossing that interface under new ids, sent by two forwarders
//! (one each way, or seen from a tap that tells no direction) each hundreds of times a
//! second, and never answered. No client retries like that, and a chain of forwarders to a
//! dead upstream forwards only as fast as its clients ask. That is a possible loop, reported
//! with that evidence rather than not at all; where the path is seen, the cycle is reported
//! instead, and the storm is not.
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, SystemTime},
};

use super::describe::LoopKey;
use crate::{
    analyzers::{
        packet::QuestionKey,
        table::{FastHash, Table},
    },
    finding::{Hop, LoopFinding, LoopId, Unconfirmable, Unconfirmed},
    observation::{Namespace, Observation, Question},
    points::NODE,
    present::{mnemonic, names::Names},
};

/// How long a storm is counted before it is judged: longer than a forwarder waits for its
/// upstream before it answers SERVFAIL, so that a chain of forwarders to a dead upstream has
/// answered by then.
pub const STORM_WINDOW: Duration = Duration::from_secs(3);
/// Queries from each of two senders within the window: hundreds a second. A resolver retries
/// a question about once a second.
const STORM_QUERIES: u64 = 1500;
/// Senders of one question counted at one interface.
const SENDERS: usize = 8;
/// Sightings of the storm's queries shown as its path.
const SHOWN: usize = 4;

/// The storm of one question at one interface, the first it was seen at in the window (a
/// packet seen at several, a bridge and its port, is counted once), over one window.
pub struct Window {
    ifname: Arc<str>,
    start: SystemTime,
    last: SystemTime,
    question: Question,
    probe: dnsloop_shared::parse::Probe,
    /// Its queries by sender, the first `SENDERS` senders; and the rest.
    senders: Vec<(IpAddr, u64)>,
    others: u64,
    servers: Vec<SocketAddr>,
    /// Where its queries went, when they entered a watched namespace.
    enters: Option<Namespace>,
    answered: bool,
    shown: Vec<Hop>,
}

impl Window {
    fn count(&mut self, obs: &Observation) {
        self.last = self.last.max(obs.ts);
        let sender = obs.src.ip();
        let room = self.senders.len() < SENDERS;
        match self.senders.iter_mut().find(|(known, _)| *known == sender) {
            Some((_, count)) => *count += 1,
            None if room => self.senders.push((sender, 1)),
            None => self.others += 1,
        }
        if self.servers.len() < SHOWN && !self.servers.contains(&obs.dst) {
            self.servers.push(obs.dst);
        }
        if self.enters.is_none() {
            self.enters.clone_from(&obs.point.enters);
        }
        if self.shown.len() < SHOWN {
            self.shown.push(Hop::of(obs));
        }
    }

    /// The two senders that sent the most, if both sent a storm's worth.
    fn storming(&self) -> Option<(IpAddr, IpAddr)> {
        let mut senders = self.senders.clone();
        senders.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        match senders.as_slice() {
            [(first, most), (second, next), ..] if *next >= STORM_QUERIES && *most >= *next => {
                Some((*first, *second))
            }
            _ => None,
        }
    }
}

/// Storms being counted, by question.
pub struct Storms {
    windows: Table<QuestionKey, Window, FastHash>,
}

impl Storms {
    pub fn new(capacity: usize) -> Self {
        Self {
            windows: Table::with_hasher(capacity),
        }
    }

    /// Counts the query `obs` of `question`.
    pub fn query(&mut self, question: &QuestionKey, obs: &Observation) {
        let Some(asked) = &obs.question else {
            return;
        };
        let window = match self.windows.get_mut(question) {
            Some(window) => window,
            None => {
                self.windows.insert(
                    question.clone(),
                    Window {
                        ifname: obs.point.ifname.clone(),
                        start: obs.ts,
                        last: obs.ts,
                        question: asked.clone(),
                        probe: obs.probe,
                        senders: Vec::new(),
                        others: 0,
                        servers: Vec::new(),
                        enters: None,
                        answered: false,
                        shown: Vec::new(),
                    },
                );
                let Some(window) = self.windows.get_mut(question) else {
                    return;
                };
                window
            }
        };
        if !same_interface(&window.ifname, &obs.point.ifname) {
            return;
        }
        window.count(obs);
    }

    /// A reply to a query of `question` at `ifname`: the storm there was answered.
    pub fn reply(&mut self, question: &QuestionKey, ifname: &Arc<str>) {
        if let Some(window) = self.windows.get_mut(question) {
            if same_interface(&window.ifname, ifname) {
                window.answered = true;
            }
        }
    }

    /// The windows of `STORM_WINDOW` ended by `now`: each storm with what it showed, to be
    /// reported unless its question's loop was (`reported`).
    pub fn ended(&mut self, now: SystemTime) -> Vec<(QuestionKey, Window)> {
        let mut ended = Vec::new();
        while let Some((question, window)) = self.windows.pop_stalest_if(|_, window| {
            now.duration_since(window.start)
                .is_ok_and(|age| age >= STORM_WINDOW)
        }) {
            ended.push((question, window));
        }
        ended
    }

    /// Every window, the input having ended.
    pub fn drain(&mut self) -> Vec<(QuestionKey, Window)> {
        self.windows.drain().collect()
    }

    pub fn evictions(&self) -> u64 {
        self.windows.evictions()
    }
}

impl Window {
    pub fn start(&self) -> SystemTime {
        self.start
    }

    /// The possible loop this window shows, if it shows one: a storm from two senders,
    /// unanswered.
    pub fn possible_loop(&self, at: SystemTime, names: &Names) -> Option<(LoopKey, LoopFinding)> {
        if self.answered {
            return None;
        }
        let (first, second) = self.storming()?;
        let question = &self.question;
        let qname = question.name.presented(names);
        let ifname = self.shown.first().map(|hop| hop.point.ifname.clone())?;
        let queries = self.senders.iter().map(|(_, count)| count).sum::<u64>() + self.others;
        let seconds = self
            .last
            .duration_since(self.start)
            .unwrap_or_default()
            .as_secs_f64();
        let summary = format!(
            "possible loop: {qname} {qtype}: asked {queries} times in {seconds:.1} s across \
             {ifname}, under new ids, most by {first} and {second}, and never answered: a \
             question going round a loop whose path this capture does not show. Not \
             confirmed: the capture shows the question cross {ifname}, not the namespaces it \
             goes round; capture every interface of a node it crosses (tcpdump -i any), or \
             trace it there, to see the loop",
            qtype = mnemonic::qtype(question.qtype),
        );
        let namespace = self.enters.clone().unwrap_or_else(|| Namespace::new(NODE));
        let mut servers: Vec<IpAddr> = self.servers.iter().map(SocketAddr::ip).collect();
        servers.dedup();
        Some((
            LoopKey::out_of_sight(QuestionKey::of(question)),
            LoopFinding {
                ts: at,
                since: at,
                loop_id: LoopId::of_question_written(question, names),
                qname,
                qtype: question.qtype,
                count: 1,
                unanswered: 0,
                path: self.shown.clone(),
                off_node: Vec::new(),
                servers,
                probe: self.probe,
                summary,
                dnat: Vec::new(),
                unconfirmed: vec![Unconfirmed {
                    namespace,
                    at: *self.servers.first()?,
                    why: Unconfirmable::PathNotShown,
                }],
            },
        ))
    }
}

/// Whether two points' interface names are one: the same name, mostly the same allocation.
fn same_interface(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}
