//! Streaming a packet to userspace through the ring buffer.
use core::mem::size_of;

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
use dnsloop_shared::{
    counter::Counter,
    parse::LinkLayer,
    point::ObservationPoint,
    question::copy_sightings,
    record::{
        PacketRecord, RecordContext, StreamReason, ITEM_CONTEXT, ITEM_PACKET, PACKET_SNAP_MAX,
    },
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
    let (captured, with_context) = unsafe {
        let with_context = reason.carries_query() || has_priors(&*scratch);
        if with_context {
            let context = &mut (*out).context;
            context.item = ITEM_CONTEXT;
            stores::fill(&mut context._pad, 0);
            // Field by field: a whole-struct copy compiles to a byte-at-a-time `memmove` call.
            context.matched_query.copy_from(&(*scratch).matched_query);
            copy_sightings(&mut context.priors, &(*scratch).priors);
        }
        let record = &mut (*out).record;
        record.item = ITEM_PACKET;
        record.direction = point.direction;
        record.reason = reason as u8;
        record.link_layer = link as u8;
        record.via_gateway = (*scratch).via_gateway;
        record._pad = 0;
        record.ifindex = point.ifindex;
        record.wire_len = hook.len();
        // The inspection's clock read, not a second one: the sightings the kernel keeps of this
        // packet carry that time, and a recording of it must show the same.
        record.ts_ns = (*scratch).now_ns;
        record.netns_cookie = point.netns_cookie;
        let captured = hook::copy_into(hook, 0, &mut (*out).bytes, wanted).unwrap_or(0);
        record.captured_len = captured as u16;
        (captured, with_context)
    };
    let flags = if maps::RECORDS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    // The record and the bytes it holds, no more: the ring keeps many more short packets so.
    let record_len = size_of::<PacketRecord>() + captured;
    // SAFETY: the per-CPU value holds the context, the record and `PACKET_SNAP_MAX` bytes after
    // them, and `captured` is at most that.
    let filled = unsafe {
        if with_context {
            core::slice::from_raw_parts(out.cast::<u8>(), size_of::<RecordContext>() + record_len)
        } else {
            core::slice::from_raw_parts((&raw const (*out).record).cast::<u8>(), record_len)
        }
    };
    if maps::RECORDS.output::<[u8]>(filled, flags.into()).is_err() {
        counters::bump(Counter::LostRecords);
        return;
    }
    counters::bump(Counter::StreamedRecords);
}

/// Whether the packet made its question hot, with the sightings before it to attach.
#[inline(always)]
fn has_priors(scratch: &PacketScratch) -> bool {
    let mut any = false;
    for prior in &scratch.priors {
        any |= prior.family != 0;
    }
    any
}
