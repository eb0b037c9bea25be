//! Queries waiting for their reply, as their clients see them.
//!
//! A client judges a reply where it arrives, by its own address and port, the id and the
//! question, and, for UDP on a connected socket, by where it sent the query. So a query is
//! recorded at its first sighting, before any DNAT rewrote its destination, and a reply is
//! judged only where it enters the namespace the query left: earlier hops legitimately show a
//! pod address that conntrack has yet to translate back.
use std::time::{Duration, SystemTime};

use super::{
    endpoint::Endpoint,
    has_waited,
    packet::MessageKey,
    table::{FastHash, Table},
};
use crate::observation::{Namespace, Observation, Question};

/// A query as its client sent it.
#[derive(Clone, Debug)]
pub struct SentQuery {
    pub client: Endpoint,
    /// Where it was first seen addressed to; once answered, the server that answered.
    pub server: Endpoint,
    /// Other servers the client sent the very same message to (a forwarder such as dnsmasq
    /// trying a second upstream with the same id and port): a reply from one of them is an
    /// answer, not a misdelivery. A boxed slice, grown one by one: hardly any query has one,
    /// and a node keeps tens of thousands waiting in a storm.
    pub also_sent_to: Box<[Endpoint]>,
    /// The namespace it was first seen leaving.
    pub client_namespace: Option<Namespace>,
    pub id: u16,
    pub question: Question,
    pub sent: SystemTime,
    /// It repeats a query already reported as timed out (`timeout`), which does not report it
    /// again.
    pub repeats_timed_out: bool,
}

/// What a reply is to the query it matches.
pub enum Reply<'a> {
    /// From where the query went: the query is done.
    Answer(SentQuery),
    /// From elsewhere: the client drops it and goes on waiting.
    FromElsewhere(&'a SentQuery),
}

/// Servers one query is followed to: a forwarder tries two or three.
const MAX_SERVERS_OF_ONE_QUERY: usize = 4;

pub struct Outstanding {
    wait: Duration,
    queries: Table<MessageKey, SentQuery, FastHash>,
}

impl Outstanding {
    /// Queries are forgotten once they have waited `wait`.
    pub fn new(wait: Duration, capacity: usize) -> Self {
        Self {
            wait,
            queries: Table::with_hasher(capacity),
        }
    }

    /// Records the query `obs` unless it is already waiting: later sightings (further hops, or
    /// the client's retries with the same id) are the same query. `repeats_timed_out` is asked
    /// only of a query recorded. Returns whether it was recorded: a new query, first seen.
    pub fn query(
        &mut self,
        key: &MessageKey,
        obs: &Observation,
        repeats_timed_out: impl FnOnce() -> bool,
    ) -> bool {
        let Some(question) = &obs.question else {
            return false;
        };
        if let Some(query) = self.queries.get_mut(key) {
            // Sent again from the client itself, to another server; a later hop of the same
            // sending is seen leaving another namespace (and any DNAT made it before that).
            let sent_elsewhere = obs.point.leaves == query.client_namespace
                && query.client == obs.src
                && query.server != obs.dst
                && !query.also_sent_to.contains(&obs.dst.into());
            if sent_elsewhere && query.also_sent_to.len() < MAX_SERVERS_OF_ONE_QUERY {
                let mut servers = std::mem::take(&mut query.also_sent_to).into_vec();
                servers.push(obs.dst.into());
                query.also_sent_to = servers.into_boxed_slice();
            }
            false
        } else {
            self.queries.insert(
                key.clone(),
                SentQuery {
                    client: obs.src.into(),
                    server: obs.dst.into(),
                    also_sent_to: Box::default(),
                    client_namespace: obs.point.leaves.clone(),
                    id: obs.id,
                    question: question.clone(),
                    sent: obs.ts,
                    repeats_timed_out: repeats_timed_out(),
                },
            );
            true
        }
    }

    /// What the reply `obs` means to the query it matches, if it matches one and is seen
    /// entering that query's client namespace.
    pub fn reply(&mut self, key: &MessageKey, obs: &Observation) -> Option<Reply<'_>> {
        let query = self.queries.get(key)?;
        if query.client != obs.dst || obs.point.enters != query.client_namespace {
            return None;
        }
        if query.server == obs.src || query.also_sent_to.contains(&obs.src.into()) {
            let mut answered = self.queries.remove(key)?;
            answered.server = obs.src.into();
            Some(Reply::Answer(answered))
        } else {
            self.queries.get(key).map(Reply::FromElsewhere)
        }
    }

    /// The oldest query if it has waited `wait` by `now`, removed.
    pub fn pop_expired(&mut self, now: SystemTime) -> Option<(MessageKey, SentQuery)> {
        let wait = self.wait;
        self.queries
            .pop_stalest_if(|_, query| has_waited(query.sent, wait, now))
    }

    /// Every query waiting, oldest first.
    pub fn queries(&self) -> impl Iterator<Item = &SentQuery> {
        self.queries.iter().map(|(_, query)| query)
    }

    pub fn evictions(&self) -> u64 {
        self.queries.evictions()
    }
}
