//! The question table: the questions asked recently, the state machine that finds one coming
//! back along a chain of forwards (a loop, streamed from then on), and the sightings of it kept
//! meanwhile, which the record of the query that made it hot carries.

use crate::{point::PointNamespaces, stores};

/// A question, as the question table keys it: the case-folded name hash, type and class.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuestionKey {
    pub name_hash: u64,
    pub qtype: u16,
    pub qclass: u16,
    pub _pad: [u8; 4],
}

/// Namespaces, and destinations, each question remembers.
pub const QUESTION_SLOTS: usize = 4;

/// Sightings of a question kept while it is cold, streamed with the one that makes it hot: a
/// loop between the node and a pod shows three hops a round (the client's query leaving its pod
/// for the node, the forward leaving the node for the server's pod, and that pod's forward
/// leaving it for the node), so four prove the loop from its first round. A power of two, for
/// index masks.
pub const PRIOR_SIGHTINGS: usize = 4;

/// One query sighting, as the question table judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuerySighting {
    /// IPv4 in the first 4 bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// The source is known to serve DNS (it answered a query, or it is the node's or loopback).
    pub src_serves_dns: bool,
    pub at: PointNamespaces,
}

/// What the kernel remembers about a question asked recently.
///
/// A loop is a question that re-enters a namespace along a chain of forwards. The table sees
/// forwards without following them: a query is a forward when its source serves DNS or was sent
/// the question recently (`sent_to`); a namespace that a forward leaves is forwarding the question
/// (`forwarding`) until an answer to it enters there. A forward entering a namespace that is
/// forwarding the question is the question coming back: from then on every sighting is streamed
/// (the question is hot) until it has been quiet for the window. Popular questions forwarded
/// for many clients never come back into the forwarder, and stay cold.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuestionState {
    /// The latest sighting: a question quiet for the window starts afresh.
    pub last_ns: u64,
    /// Set once the question came back into a namespace that was forwarding it.
    pub hot: u8,
    /// The slot of `sent_to` to fill next.
    pub sent_to_next: u8,
    /// The slot of `cold` to fill next.
    pub cold_next: u8,
    pub _pad: [u8; 5],
    /// Namespaces with a forward of the question unanswered (0: free slot), since when.
    pub forwarding: [u32; QUESTION_SLOTS],
    pub forwarding_since: [u64; QUESTION_SLOTS],
    /// Where the question was sent lately (IPv4 in the first 4 bytes; all zero: free slot).
    pub sent_to: [[u8; 16]; QUESTION_SLOTS],
    /// The latest sightings while the question was not hot (not streamed), a ring from
    /// `cold_next`: the round that brought the question back.
    pub cold: [Sighting; PRIOR_SIGHTINGS],
}

/// One sighting of a query: enough for userspace to rebuild the observation of a packet that
/// was counted but not streamed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sighting {
    pub ts_ns: u64,
    /// As in [`ObservationPoint`](crate::point::ObservationPoint).
    pub netns_cookie: u64,
    /// IPv4 in the first 4 bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub ifindex: u32,
    pub sport: u16,
    pub dport: u16,
    pub id: u16,
    pub direction: u8,
    /// `parse::Transport as u8`.
    pub transport: u8,
    /// `parse::IpFamily as u8`; 0 when there is no sighting.
    pub family: u8,
    /// As in [`PacketRecord`](crate::record::PacketRecord).
    pub via_gateway: u8,
    pub _pad: [u8; 2],
}

impl Sighting {
    /// `*self = *other`, field by field (see [`stores`]).
    #[inline(always)]
    pub fn copy_from(&mut self, other: &Self) {
        self.ts_ns = other.ts_ns;
        self.netns_cookie = other.netns_cookie;
        stores::copy(&mut self.src, &other.src);
        stores::copy(&mut self.dst, &other.dst);
        self.ifindex = other.ifindex;
        self.sport = other.sport;
        self.dport = other.dport;
        self.id = other.id;
        self.direction = other.direction;
        self.transport = other.transport;
        self.family = other.family;
        self.via_gateway = other.via_gateway;
        stores::fill(&mut self._pad, 0);
    }
}

/// Copies every sighting of `from` into `to`, field by field (see [`stores`]).
#[inline(always)]
pub fn copy_sightings(to: &mut [Sighting; PRIOR_SIGHTINGS], from: &[Sighting; PRIOR_SIGHTINGS]) {
    for (to, from) in to.iter_mut().zip(from) {
        to.copy_from(from);
    }
}

/// What a query sighting made of its question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heat {
    /// Not come back: not streamed.
    Cold,
    /// This sighting is the question coming back: streamed, with the cold sightings before it
    /// attached.
    BecameHot,
    /// Already hot: streamed.
    Hot,
}

impl QuestionState {
    /// The state of a question not seen for a quiet window. The kernel inserts a zeroed
    /// state instead, which its first sighting resets the same way.
    #[inline(always)]
    pub const fn fresh(now_ns: u64) -> Self {
        Self {
            last_ns: now_ns,
            hot: 0,
            sent_to_next: 0,
            cold_next: 0,
            _pad: [0; 5],
            forwarding: [0; QUESTION_SLOTS],
            forwarding_since: [0; QUESTION_SLOTS],
            sent_to: [[0; 16]; QUESTION_SLOTS],
            cold: [Sighting {
                ts_ns: 0,
                netns_cookie: 0,
                src: [0; 16],
                dst: [0; 16],
                ifindex: 0,
                sport: 0,
                dport: 0,
                id: 0,
                direction: 0,
                transport: 0,
                family: 0,
                via_gateway: 0,
                _pad: [0; 2],
            }; PRIOR_SIGHTINGS],
        }
    }

    /// Whether the question is hot at `now_ns`: it came back, and it has not been quiet for
    /// `window_ns` since.
    #[inline(always)]
    pub fn is_hot_at(&self, now_ns: u64, window_ns: u64) -> bool {
        self.hot != 0 && now_ns.saturating_sub(self.last_ns) <= window_ns
    }

    /// Records a query sighting at `now_ns` and says whether it should be streamed (see the
    /// type's documentation). The caller keeps `cold` up to date for `Heat::Cold` ones.
    #[inline(always)]
    pub fn record_query(&mut self, now_ns: u64, window_ns: u64, seen: &QuerySighting) -> Heat {
        if now_ns.saturating_sub(self.last_ns) > window_ns {
            self.reset(now_ns);
        }
        self.last_ns = now_ns;
        if self.hot != 0 {
            return Heat::Hot;
        }
        let mut was_sent_it = false;
        for slot in 0..QUESTION_SLOTS {
            was_sent_it |= self.sent_to[slot] == seen.src;
        }
        let forward = seen.src_serves_dns || was_sent_it;
        if forward
            && self
                .forwarding_since(seen.at.enters, now_ns, window_ns)
                .is_some()
        {
            self.hot = 1;
            return Heat::BecameHot;
        }
        self.remember_destination(seen.dst);
        if forward && seen.at.leaves != 0 {
            self.mark_forwarding(seen.at.leaves, now_ns);
        }
        Heat::Cold
    }

    /// Forgets the last window, field by field: the whole state is too big for the BPF stack,
    /// where a new value would be built.
    #[inline(always)]
    pub fn reset(&mut self, now_ns: u64) {
        self.last_ns = now_ns;
        self.hot = 0;
        self.sent_to_next = 0;
        stores::fill(&mut self.forwarding, 0);
        stores::fill(&mut self.forwarding_since, 0);
        for destination in &mut self.sent_to {
            stores::fill(destination, 0);
        }
        for sighting in &mut self.cold {
            sighting.family = 0;
        }
    }

    /// Records an answer to the question entering `namespace`: a forward from there is done.
    #[inline(always)]
    pub fn record_answer(&mut self, namespace: u32) {
        for slot in 0..QUESTION_SLOTS {
            if namespace != 0 && self.forwarding[slot] == namespace {
                self.forwarding[slot] = 0;
            }
        }
    }

    /// When `namespace` started forwarding the question, if it still is (within the window).
    #[inline(always)]
    fn forwarding_since(&self, namespace: u32, now_ns: u64, window_ns: u64) -> Option<u64> {
        let mut since = None;
        for slot in 0..QUESTION_SLOTS {
            let recent = now_ns.saturating_sub(self.forwarding_since[slot]) <= window_ns;
            if namespace != 0 && self.forwarding[slot] == namespace && recent {
                since = Some(self.forwarding_since[slot]);
            }
        }
        since
    }

    #[inline(always)]
    fn remember_destination(&mut self, dst: [u8; 16]) {
        let mut known = false;
        for slot in 0..QUESTION_SLOTS {
            known |= self.sent_to[slot] == dst;
        }
        if !known {
            let slot = usize::from(self.sent_to_next) % QUESTION_SLOTS;
            stores::copy(&mut self.sent_to[slot], &dst);
            self.sent_to_next = ((slot + 1) % QUESTION_SLOTS) as u8;
        }
    }

    /// Marks `namespace` as forwarding the question since `now_ns`: in its own slot if it has
    /// one, else in a free one, else in place of the oldest.
    #[inline(always)]
    fn mark_forwarding(&mut self, namespace: u32, now_ns: u64) {
        let mut chosen = 0;
        let mut found = false;
        for slot in 0..QUESTION_SLOTS {
            if !found && self.forwarding[slot] == namespace {
                chosen = slot;
                found = true;
            }
        }
        for slot in 0..QUESTION_SLOTS {
            if !found && self.forwarding[slot] == 0 {
                chosen = slot;
                found = true;
            }
        }
        if !found {
            for slot in 1..QUESTION_SLOTS {
                if self.forwarding_since[slot] < self.forwarding_since[chosen] {
                    chosen = slot;
                }
            }
        }
        self.forwarding[chosen] = namespace;
        self.forwarding_since[chosen] = now_ns;
    }
}

#[cfg(feature = "user")]
crate::pod!(QuestionKey, QuestionState, Sighting);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn question_types_have_no_implicit_padding() {
        assert_eq!(size_of::<QuestionKey>(), 16);
        assert_eq!(size_of::<Sighting>(), 64);
        assert_eq!(
            size_of::<QuestionState>(),
            8 + 8 + QUESTION_SLOTS * (4 + 8 + 16) + 64 * PRIOR_SIGHTINGS
        );
    }

    const WINDOW: u64 = 2_000_000_000;
    const NODE: u32 = 1;
    const COREDNS: u32 = 2;
    const CLIENT: u32 = 3;

    fn ip(last: u8) -> [u8; 16] {
        let mut address = [0; 16];
        address[..4].copy_from_slice(&[10, 0, 0, last]);
        address
    }

    fn query(src: u8, dst: u8, serves_dns: bool, leaves: u32, enters: u32) -> QuerySighting {
        QuerySighting {
            src: ip(src),
            dst: ip(dst),
            src_serves_dns: serves_dns,
            at: PointNamespaces { leaves, enters },
        }
    }

    /// The node-local cache (on the node, sending from .1, known to serve DNS) forwarding a
    /// client's question to a CoreDNS pod (.3), hop by hop.
    fn cache_forwards(state: &mut QuestionState, at: u64) -> [Heat; 4] {
        [
            state.record_query(at, WINDOW, &query(2, 10, false, CLIENT, 0)),
            state.record_query(at, WINDOW, &query(2, 10, false, 0, NODE)),
            state.record_query(at, WINDOW, &query(1, 3, true, NODE, 0)),
            state.record_query(at, WINDOW, &query(1, 3, true, 0, COREDNS)),
        ]
    }

    #[test]
    fn a_question_forwarded_for_many_clients_stays_cold() {
        let mut state = QuestionState::fresh(0);
        for at in 0..100 {
            assert_eq!(cache_forwards(&mut state, at), [Heat::Cold; 4]);
            if at % 2 == 0 {
                state.record_answer(NODE);
            }
        }
    }

    #[test]
    fn a_forward_coming_back_into_the_forwarder_makes_the_question_hot_until_it_is_quiet() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        // CoreDNS, which was sent the question, sends it back to the node-local cache.
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, COREDNS, 0)),
            Heat::Cold
        );
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, 0, NODE)),
            Heat::BecameHot,
            "the node was forwarding it"
        );
        assert_eq!(cache_forwards(&mut state, 20), [Heat::Hot; 4]);
        assert!(
            state.is_hot_at(20 + WINDOW, WINDOW),
            "replies stream while it is hot"
        );
        assert!(
            !state.is_hot_at(21 + WINDOW, WINDOW),
            "not once it has been quiet"
        );
        assert_eq!(
            cache_forwards(&mut state, 21 + WINDOW),
            [Heat::Cold; 4],
            "reset"
        );
    }

    #[test]
    fn an_answered_forward_is_no_longer_waited_for() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        state.record_answer(NODE);
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, 0, NODE)),
            Heat::Cold
        );
    }

    #[test]
    fn a_server_forwarding_to_its_own_loopback_comes_back_on_the_second_round() {
        let mut state = QuestionState::fresh(0);
        let to_itself = query(1, 1, true, COREDNS, COREDNS);
        assert_eq!(state.record_query(0, WINDOW, &to_itself), Heat::Cold);
        assert_eq!(state.record_query(5, WINDOW, &to_itself), Heat::BecameHot);
    }

    #[test]
    fn a_forward_older_than_the_window_is_forgotten() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        // Sightings keep the window open, but the node's forward is too old to come back.
        for at in [WINDOW / 2, WINDOW, WINDOW + WINDOW / 2] {
            state.record_query(at, WINDOW, &query(2, 10, false, CLIENT, 0));
        }
        assert_eq!(
            state.record_query(2 * WINDOW + 1, WINDOW, &query(3, 10, true, 0, NODE)),
            Heat::Cold
        );
    }

    #[test]
    fn many_forwarding_namespaces_keep_the_latest() {
        let mut state = QuestionState::fresh(0);
        for (at, namespace) in (10..20).enumerate() {
            state.record_query(at as u64, WINDOW, &query(1, 9, true, namespace, 0));
        }
        assert_eq!(
            state.record_query(30, WINDOW, &query(1, 9, true, 0, 19)),
            Heat::BecameHot
        );
        let mut state = QuestionState::fresh(0);
        for (at, namespace) in (10..20).enumerate() {
            state.record_query(at as u64, WINDOW, &query(1, 9, true, namespace, 0));
        }
        assert_eq!(
            state.record_query(30, WINDOW, &query(1, 9, true, 0, 10)),
            Heat::Cold,
            "the oldest gave its slot"
        );
    }
}
