//! The object's programs, as the kernel finds them: one set per build (`main.rs`,
//! `before_5_17.rs`), each for the kernels of its [`Linux`](super::Linux).

/// Defines the programs of a build for `$linux`, with the license and panic handler every
/// object needs. The programs' names are the same in every build: userspace, `tc` and `bpftool`
/// know them by these.
macro_rules! entry_points {
    ($linux:ty) => {
        use aya_ebpf::{
            bindings::{bpf_raw_tracepoint_args, xdp_action::XDP_PASS, TC_ACT_UNSPEC},
            macros::{classifier, xdp},
            programs::{RawTracePointContext, TcContext, XdpContext},
        };
        use dnsloop_shared::point::Direction;

        #[classifier]
        pub fn dnsloop_ingress(ctx: TcContext) -> i32 {
            programs::observe::<$linux, _>(programs::Skb(ctx.skb.skb), Direction::Ingress);
            TC_ACT_UNSPEC
        }

        #[classifier]
        pub fn dnsloop_egress(ctx: TcContext) -> i32 {
            programs::observe::<$linux, _>(programs::Skb(ctx.skb.skb), Direction::Egress);
            TC_ACT_UNSPEC
        }

        /// Ingress at XDP (`trace --xdp`), in place of `dnsloop_ingress`: it sees a frame
        /// before the kernel builds a socket buffer for it, and always passes it on.
        #[xdp]
        pub fn dnsloop_xdp_ingress(ctx: XdpContext) -> u32 {
            programs::observe::<$linux, _>(programs::Xdp(ctx.ctx), Direction::Ingress);
            XDP_PASS
        }

        /// On the `kfree_skb` raw tracepoint: a DNS packet the kernel dropped, with why and
        /// where (see `programs::observe_drop`). It only reads.
        ///
        /// Written out rather than with aya's `#[raw_tracepoint]`, whose entry takes a
        /// `void *`: a global function's context must point to the program type's own struct
        /// before Linux 6.7, which refuses `void *` ("reg type unsupported for arg#0").
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "raw_tp/kfree_skb")]
        pub fn dnsloop_drop(ctx: *mut bpf_raw_tracepoint_args) -> i32 {
            programs::observe_drop::<$linux>(&RawTracePointContext::new(ctx.cast()));
            0
        }

        #[panic_handler]
        fn panic(_info: &core::panic::PanicInfo) -> ! {
            // The parser and programs have no panicking paths; this only satisfies no_std.
            loop {}
        }

        #[unsafe(link_section = "license")]
        #[unsafe(no_mangle)]
        static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
    };
}
