//! dnsloop's kernel programs: TC/TCX classifiers on ingress and egress that parse every DNS
//! packet, count it, track the questions it asks, and stream to userspace only what matters.
//!
//! They never drop or modify a packet: every path returns `TC_ACT_UNSPEC`, which under TCX
//! means "next program", or `XDP_PASS`, so dnsloop never changes the fate of a packet or of
//! another program attached to the same hook.
//!
//! The programs only build for the BPF target (aya-build builds them from
//! dnsloop-userspace/build.rs, with the nightly toolchain). A host build of the workspace
//! (`cargo clippy --workspace`, `cargo build --workspace`) compiles this binary too: there it is
//! an empty `main`, and every BPF-only item below is left out with `cfg(target_arch = "bpf")`.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// Atomic adds to shared map values: the BPF target has no compare-and-swap, so core offers no
// `fetch_add`, but the kernel has an atomic add instruction, which this intrinsic compiles to.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(
    target_arch = "bpf",
    expect(internal_features, reason = "core_intrinsics, for the atomic add")
)]

#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(target_arch = "bpf")]
use aya_ebpf::{
    bindings::{bpf_raw_tracepoint_args, xdp_action::XDP_PASS, TC_ACT_UNSPEC},
    macros::{classifier, xdp},
    programs::{RawTracePointContext, TcContext, XdpContext},
};
#[cfg(target_arch = "bpf")]
use dnsloop_ebpf::point::Direction;

#[cfg(target_arch = "bpf")]
use programs::{Skb, Xdp};

/// The host stub: the programs need aya-ebpf and the BPF target's intrinsics, which a host
/// build has neither of, and running this binary on the host means nothing.
#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
#[classifier]
pub fn dnsloop_ingress(ctx: TcContext) -> i32 {
    programs::observe(Skb(ctx.skb.skb), Direction::Ingress);
    TC_ACT_UNSPEC
}

#[cfg(target_arch = "bpf")]
#[classifier]
pub fn dnsloop_egress(ctx: TcContext) -> i32 {
    programs::observe(Skb(ctx.skb.skb), Direction::Egress);
    TC_ACT_UNSPEC
}

/// Ingress at XDP (`trace --xdp`), in place of `dnsloop_ingress`: it sees a frame before the
/// kernel builds a socket buffer for it, and always passes it on.
#[cfg(target_arch = "bpf")]
#[xdp]
pub fn dnsloop_xdp_ingress(ctx: XdpContext) -> u32 {
    programs::observe(Xdp(ctx.ctx), Direction::Ingress);
    XDP_PASS
}

/// On the `kfree_skb` raw tracepoint: a DNS packet the kernel dropped, with why and where (see
/// `programs::observe_drop`). It only reads.
///
/// Written out rather than with aya's `#[raw_tracepoint]`, whose entry takes a `void *`: a
/// global function's context must point to the program type's own struct before Linux 6.7,
/// which refuses `void *` ("reg type unsupported for arg#0").
#[cfg(target_arch = "bpf")]
#[unsafe(no_mangle)]
#[unsafe(link_section = "raw_tp/kfree_skb")]
pub fn dnsloop_drop(ctx: *mut bpf_raw_tracepoint_args) -> i32 {
    programs::observe_drop(&RawTracePointContext::new(ctx.cast()));
    0
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The parser and programs have no panicking paths; this only satisfies no_std.
    loop {}
}

#[cfg(target_arch = "bpf")]
#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
