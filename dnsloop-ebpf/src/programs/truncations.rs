//! Truncated answers and the retries over TCP they call for. Without every packet streamed,
//! userspace sees a truncated answer reach its client (it is streamed with its query), and the
//! client's retry over TCP only if this table marks the question as awaited there: the retry
//! comes from a new socket, which nothing else links to the answer.
use aya_ebpf::bindings::BPF_ANY;
use dnsloop_shared::{
    parse::{Question, Transport},
    truncation::TruncatedKey,
};

use super::maps::{config, PacketScratch, TRUNCATED};

/// Notes that the answer in `scratch`, which has TC set, reached its client.
#[inline(always)]
pub fn note_answer(question: &Question, scratch: &PacketScratch) {
    let key = key(scratch.segment.dst, question);
    let _ = TRUNCATED.insert(&key, &scratch.now_ns, BPF_ANY.into());
}

/// Whether the query in `scratch` is its client asking over TCP, within the hot window, a
/// question it was answered truncated.
#[inline(always)]
pub fn retries_over_tcp(question: &Question, scratch: &PacketScratch) -> bool {
    if !matches!(scratch.segment.transport, Transport::Tcp) {
        return false;
    }
    let key = key(scratch.segment.src, question);
    // SAFETY: a lookup in our map; the value is a plain u64, copied at once.
    let Some(&answered_ns) = (unsafe { TRUNCATED.get(&key) }) else {
        return false;
    };
    scratch.now_ns.saturating_sub(answered_ns) < config().hot_window_ns
}

#[inline(always)]
fn key(client: [u8; 16], question: &Question) -> TruncatedKey {
    TruncatedKey {
        client,
        name_hash: question.name_hash,
        qtype: question.qtype,
        qclass: question.qclass,
        _pad: [0; 4],
    }
}
