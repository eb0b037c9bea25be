//! Streaming a packet to userspace through the ring buffer.
use core::mem::size_of;

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::bpf_ktime_get_ns,
};
use dnsloop_shared::{
    counter::Counter,
    parse::LinkLayer,
    point::ObservationPoint,
    question::copy_sightings,
    record::{PacketRecord, StreamReason, PACKET_SNAP_MAX},
    stores,
};

use super::{
    counters,
    hook::{self, Hook},
    maps,
    maps::PacketScratch,
};

/// Userspace also polls on a short timer, so records need not wake it one by one: only once this
/// much is waiting. That keeps the tracer asleep on a busy node.
const WAKEUP_BYTES: u64 = 256 * 1024;

/// Its own BPF function, not inlined: its locals would otherwise enlarge the classifier's static
/// frame, which shares the 512-byte stack budget with classification's.
#[inline(never)]
pub fn packet<H: Hook>(
    hook: H,
    point: &ObservationPoint,
    link: LinkLayer,
    reason: StreamReason,
    scratch: *const PacketScratch,
) {
    let Some(out) = maps::STREAM_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let snap = (maps::config().snap_len as usize).min(PACKET_SNAP_MAX);
    let wanted = (hook.len() as usize).min(snap);
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let captured = unsafe {
        let record = &mut (*out).record;
        record.ts_ns = bpf_ktime_get_ns();
        record.netns_cookie = point.netns_cookie;
        record.ifindex = point.ifindex;
        record.wire_len = hook.len();
        record.direction = point.direction;
        record.reason = reason as u8;
        record.link_layer = link as u8;
        record.via_gateway = (*scratch).via_gateway;
        stores::fill(&mut record._pad, 0);
        // Field by field: a whole-struct copy compiles to a byte-at-a-time `memmove` call.
        record.matched_query.copy_from(&(*scratch).matched_query);
        copy_sightings(&mut record.priors, &(*scratch).priors);
        let captured = hook::copy_into(hook, 0, &mut (*out).bytes, wanted).unwrap_or(0);
        record.captured_len = captured as u16;
        captured
    };
    let flags = if maps::RECORDS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    // The record and the bytes it holds, no more: the ring keeps many more short packets so.
    let len = size_of::<PacketRecord>() + captured;
    // SAFETY: the per-CPU value holds the record and `PACKET_SNAP_MAX` bytes after it, and
    // `captured` is at most that.
    let filled = unsafe { core::slice::from_raw_parts(out.cast::<u8>(), len) };
    if maps::RECORDS.output::<[u8]>(filled, flags.into()).is_err() {
        counters::bump(Counter::LostRecords);
        return;
    }
    counters::bump(Counter::StreamedRecords);
}
