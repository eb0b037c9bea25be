//! dnsloop's kernel programs: TC/TCX classifiers on ingress and egress that parse every DNS
//! packet, count it, track the questions it asks, and stream to userspace only what matters.
//!
//! They never drop or modify a packet: every path returns `TC_ACT_UNSPEC`, which under TCX
//! means "next program", or `XDP_PASS`, so dnsloop never changes the fate of a packet or of
//! another program attached to the same hook.
#![no_std]
#![no_main]
// Atomic adds to shared map values: the BPF target has no compare-and-swap, so core offers no
// `fetch_add`, but the kernel has an atomic add instruction, which this intrinsic compiles to.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod programs;

use aya_ebpf::{
    bindings::{xdp_action::XDP_PASS, TC_ACT_UNSPEC},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use dnsloop_ebpf::point::Direction;

use programs::{Skb, Xdp};

#[classifier]
pub fn dnsloop_ingress(ctx: TcContext) -> i32 {
    programs::observe(Skb(ctx.skb.skb), Direction::Ingress);
    TC_ACT_UNSPEC
}

#[classifier]
pub fn dnsloop_egress(ctx: TcContext) -> i32 {
    programs::observe(Skb(ctx.skb.skb), Direction::Egress);
    TC_ACT_UNSPEC
}

/// Ingress at XDP (`trace --xdp`), in place of `dnsloop_ingress`: it sees a frame before the
/// kernel builds a socket buffer for it, and always passes it on.
#[xdp]
pub fn dnsloop_xdp_ingress(ctx: XdpContext) -> u32 {
    programs::observe(Xdp(ctx.ctx), Direction::Ingress);
    XDP_PASS
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
