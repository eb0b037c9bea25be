//! The question table: which questions are being asked with several IDs right now.
use aya_ebpf::helpers::bpf_ktime_get_ns;
use dnsloop_ebpf::{
    event::{QuestionKey, QuestionState},
    parse::Question,
};

use super::maps::QUESTIONS;

/// Records a query for `question` with `id`; returns whether the question is hot (see
/// `QuestionState::record_sighting`).
#[inline(always)]
pub fn sighting(question: &Question, id: u16, window_ns: u64) -> bool {
    let key = key_of(question);
    let now = now_ns();
    match QUESTIONS.get_ptr_mut(&key) {
        // SAFETY: a value of our map; a concurrent update on another CPU can only skew counts.
        Some(state) => unsafe { (*state).record_sighting(id, now, window_ns) },
        None => {
            let _ = QUESTIONS.insert(&key, &QuestionState::first_sighting(id, now), 0);
            false
        }
    }
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
