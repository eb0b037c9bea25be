//! Streaming a packet to userspace through the ring buffer.
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
    let Some(mut entry) = maps::RECORDS.reserve::<PacketRecord>(0) else {
        counters::bump(Counter::LostRecords);
        return;
    };
    let record = entry.as_mut_ptr();
    let snap = (maps::config().snap_len as usize).min(PACKET_SNAP_MAX);
    let wanted = (hook.len() as usize).min(snap);
    // SAFETY: `record` points to reserved ring memory of the right size, ours until submit.
    unsafe {
        (*record).ts_ns = bpf_ktime_get_ns();
        (*record).netns_cookie = point.netns_cookie;
        (*record).ifindex = point.ifindex;
        (*record).wire_len = hook.len();
        (*record).direction = point.direction;
        (*record).reason = reason as u8;
        (*record).link_layer = link as u8;
        (*record).via_gateway = (*scratch).via_gateway;
        stores::fill(&mut (*record)._pad, 0);
        // Map to ring memory directly, field by field: a copy through the stack would not fit
        // its budget, and a whole-struct copy compiles to a byte-at-a-time `memmove` call.
        (*record).matched_query.copy_from(&(*scratch).matched_query);
        copy_sightings(&mut (*record).priors, &(*scratch).priors);
        let captured = hook::copy_into(hook, 0, &mut (*record).bytes, wanted).unwrap_or(0);
        (*record).captured_len = captured as u16;
    }
    let flags = if maps::RECORDS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(flags.into());
    counters::bump(Counter::StreamedRecords);
}
