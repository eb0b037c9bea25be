//! The question table: which questions are coming back into a namespace that forwarded them
//! (see `QuestionState`).
use aya_ebpf::bindings::BPF_NOEXIST;
use dnsloop_shared::{
    parse::Question,
    question::{Heat, QuerySighting, QuestionKey, Sighting, PRIOR_SIGHTINGS},
    stores,
};

use super::{
    forwarders,
    maps::{PacketScratch, NEW_QUESTION, QUESTIONS},
};

/// Records a sighting of the query with `id` for `question`, seen where `scratch` says. While the
/// question is cold the sighting is remembered; when this one makes it hot, the remembered ones
/// go to `scratch.priors`, oldest first, to be streamed with it.
#[inline(always)]
pub fn query_sighting(
    question: &Question,
    id: u16,
    window_ns: u64,
    scratch: &mut PacketScratch,
) -> Heat {
    let key = key_of(question);
    let now = scratch.now_ns;
    let known = QUESTIONS.get_ptr_mut(&key);
    let state = match known {
        Some(state) => state,
        // A new question is built in a per-CPU value (it is too big for the stack), and
        // inserted once its first sighting is recorded.
        None => match NEW_QUESTION.get_ptr_mut(0) {
            Some(state) => {
                // SAFETY: the per-CPU value belongs to this program run until it returns.
                unsafe { (*state).reset(now) };
                state
            }
            None => return Heat::Cold,
        },
    };
    // SAFETY: a value of our maps; a concurrent update of a known question on another CPU can
    // only skew what it holds.
    let state = unsafe { &mut *state };
    let seen = QuerySighting {
        src: scratch.segment.src,
        dst: scratch.segment.dst,
        src_serves_dns: forwarders::sent_by_forwarder(&scratch.segment),
        at: scratch.at,
    };
    let heat = state.record_query(now, window_ns, &seen);
    match heat {
        Heat::Cold => {
            let slot = usize::from(state.cold_next) & (PRIOR_SIGHTINGS - 1);
            remember(&mut state.cold[slot], id, now, scratch);
            state.cold_next = ((slot + 1) & (PRIOR_SIGHTINGS - 1)) as u8;
        }
        Heat::BecameHot => {
            for age in 0..PRIOR_SIGHTINGS {
                let slot = (usize::from(state.cold_next) + age) & (PRIOR_SIGHTINGS - 1);
                scratch.priors[age].copy_from(&state.cold[slot]);
            }
        }
        Heat::Hot => {}
    }
    if known.is_none() {
        // If another CPU inserted the question meanwhile, its first sighting stands.
        let _ = QUESTIONS.insert(&key, state, BPF_NOEXIST.into());
    }
    heat
}

/// Records a reply to `question` seen where `scratch` says, and says whether the question is
/// hot (replies to a hot question are streamed, or every forward would look unanswered).
#[inline(always)]
pub fn answer_sighting(question: &Question, window_ns: u64, scratch: &PacketScratch) -> bool {
    let Some(state) = QUESTIONS.get_ptr_mut(&key_of(question)) else {
        return false;
    };
    // SAFETY: as above.
    let state = unsafe { &mut *state };
    state.record_answer(scratch.at.enters);
    state.is_hot_at(scratch.now_ns, window_ns)
}

/// Writes the sighting in place: the map value, not the stack, holds it.
#[inline(always)]
fn remember(sighting: &mut Sighting, id: u16, now: u64, scratch: &PacketScratch) {
    let segment = &scratch.segment;
    sighting.ts_ns = now;
    sighting.netns_cookie = scratch.netns_cookie;
    stores::copy(&mut sighting.src, &segment.src);
    stores::copy(&mut sighting.dst, &segment.dst);
    sighting.ifindex = scratch.ifindex;
    sighting.sport = segment.sport;
    sighting.dport = segment.dport;
    sighting.id = id;
    sighting.direction = scratch.direction;
    sighting.transport = segment.transport as u8;
    sighting.family = segment.family as u8;
    sighting.via_gateway = scratch.via_gateway;
}

#[inline(always)]
fn key_of(question: &Question) -> QuestionKey {
    QuestionKey {
        name_hash: question.name_hash,
        qtype: question.qtype,
        qclass: question.qclass,
        _pad: [0; 4],
    }
}
