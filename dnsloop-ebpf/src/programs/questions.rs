//! The question table: which questions are being asked with several IDs right now.
use aya_ebpf::helpers::bpf_ktime_get_ns;
use dnsloop_ebpf::{
    event::{Heat, QuestionKey, QuestionState, Sighting},
    parse::Question,
};

use super::maps::{Verdict, QUESTIONS};

/// Records a sighting of the query with `id` for `question`, seen where `verdict` says (see
/// `QuestionState::record_sighting`). While the question is cold the sighting is remembered;
/// when this one makes it hot, the remembered one goes to `verdict.prior` to be streamed with it.
#[inline(always)]
pub fn sighting(
    question: &Question,
    id: u16,
    window_ns: u64,
    from_forwarder: bool,
    verdict: &mut Verdict,
) -> Heat {
    let key = key_of(question);
    let now = now_ns();
    let Some(state) = QUESTIONS.get_ptr_mut(&key) else {
        // Inserted, then filled in place: the value is too big to build on the stack too.
        let _ = QUESTIONS.insert(&key, &QuestionState::first_sighting(id, now), 0);
        if let Some(state) = QUESTIONS.get_ptr_mut(&key) {
            // SAFETY: as below.
            remember(unsafe { &mut (*state).last_cold }, id, now, verdict);
        }
        return Heat::Cold;
    };
    // SAFETY: a value of our map; a concurrent update on another CPU can only skew what it holds.
    let state = unsafe { &mut *state };
    let heat = state.record_sighting(id, now, window_ns, from_forwarder);
    match heat {
        Heat::Cold => remember(&mut state.last_cold, id, now, verdict),
        Heat::BecameHot => verdict.prior = state.last_cold,
        Heat::Hot => {}
    }
    heat
}

/// Writes the sighting in place: the map value, not the stack, holds it.
#[inline(always)]
fn remember(sighting: &mut Sighting, id: u16, now: u64, verdict: &Verdict) {
    let segment = &verdict.segment;
    sighting.ts_ns = now;
    sighting.netns_cookie = verdict.netns_cookie;
    sighting.src = segment.src;
    sighting.dst = segment.dst;
    sighting.ifindex = verdict.ifindex;
    sighting.sport = segment.sport;
    sighting.dport = segment.dport;
    sighting.id = id;
    sighting.direction = verdict.direction;
    sighting.transport = segment.transport as u8;
    sighting.family = segment.family as u8;
}

/// Whether `question` is hot now, without counting a sighting (for replies).
#[inline(always)]
pub fn is_hot(question: &Question, window_ns: u64) -> bool {
    // SAFETY: a plain-data value of our map.
    match unsafe { QUESTIONS.get(&key_of(question)) } {
        Some(state) => state.is_hot_at(now_ns(), window_ns),
        None => false,
    }
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

#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    unsafe { bpf_ktime_get_ns() }
}
