//! What dnsloop's kernel cost is measured against, attached where dnsloop's programs are, on the
//! same load:
//! - `bench_empty`, a TC classifier that returns at once: the floor, what running any program
//!   costs;
//! - `bench_lookup`, a classifier that adds one to a count in a hash map for every packet:
//!   the least that a program remembering something about each packet in a kernel map pays, as
//!   dnsloop remembers queries and questions;
//! - `bench_kfree_skb`, a program on the `kfree_skb` tracepoint, BTF-typed as dnsloop's drop
//!   program is, that returns at once: the drop program's floor, on the same buffers.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::TC_ACT_UNSPEC,
    macros::{btf_tracepoint, classifier, map},
    maps::LruHashMap,
    programs::{BtfTracePointContext, TcContext},
};

#[classifier]
pub fn bench_empty(_ctx: TcContext) -> i32 {
    TC_ACT_UNSPEC
}

/// Packets by length: a handful of keys on a DNS load, so that every lookup finds its entry
/// warm. An LRU map, like dnsloop's query and question tables.
#[map]
static BY_LENGTH: LruHashMap<u32, u64> = LruHashMap::with_max_entries(4096, 0);

#[classifier]
pub fn bench_lookup(ctx: TcContext) -> i32 {
    let length = ctx.len();
    match BY_LENGTH.get_ptr_mut(&length) {
        // SAFETY: a value of our map; a concurrent add on another CPU may be lost, which only
        // skews a count nobody reads.
        Some(count) => unsafe { *count += 1 },
        None => {
            let _ = BY_LENGTH.insert(&length, &1, 0);
        }
    }
    TC_ACT_UNSPEC
}

#[btf_tracepoint(function = "kfree_skb")]
pub fn bench_kfree_skb(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
