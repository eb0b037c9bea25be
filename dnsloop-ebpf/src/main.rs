//! dnsloop's kernel programs: TC/TCX classifiers on ingress and egress that parse every DNS
//! packet, count it, track the questions it asks, and stream to userspace only what matters.
//!
//! They never drop or modify a packet: every path returns `TC_ACT_UNSPEC`, which under TCX
//! means "next program", so dnsloop never changes the fate of a packet or of another program
//! attached to the same hook.
#![no_std]
#![no_main]
// Atomic adds to shared map values: the BPF target has no compare-and-swap, so core offers no
// `fetch_add`, but the kernel has an atomic add instruction, which this intrinsic compiles to.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod programs;

use aya_ebpf::{bindings::TC_ACT_UNSPEC, macros::classifier, programs::TcContext};
use dnsloop_ebpf::event::Direction;

#[classifier]
pub fn dnsloop_ingress(ctx: TcContext) -> i32 {
    programs::observe(&ctx, Direction::Ingress);
    TC_ACT_UNSPEC
}

#[classifier]
pub fn dnsloop_egress(ctx: TcContext) -> i32 {
    programs::observe(&ctx, Direction::Egress);
    TC_ACT_UNSPEC
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The parser and programs have no panicking paths; this only satisfies no_std.
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
