//! Per-CPU counters: no atomics needed, userspace sums the CPUs.
use dnsloop_shared::{
    counter::{malformed_counter_slot, Counter},
    parse::Malformed,
};

use super::maps::{COUNTERS, POINT_COUNTERS};

#[inline(always)]
pub fn bump(counter: Counter) {
    bump_slot(counter as u32);
}

#[inline(always)]
pub fn bump_malformed(reason: Malformed) {
    bump_slot(malformed_counter_slot(reason as u8));
}

#[inline(always)]
fn bump_slot(slot: u32) {
    if let Some(value) = COUNTERS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, so nothing else writes it concurrently.
        unsafe { *value += 1 };
    }
}

/// Counts a packet at the point in `slot` of the point table, or as unplaced for
/// `NO_POINT_SLOT`.
#[inline(always)]
pub fn count_point(slot: u32, is_dns: bool) {
    match POINT_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value, so nothing else writes it concurrently.
        Some(counters) => unsafe {
            (*counters).packets += 1;
            (*counters).dns_packets += u64::from(is_dns);
        },
        None => bump(Counter::UnplacedPackets),
    }
}
