//! The object's programs, as the kernel finds them: one set per build (`main.rs`,
//! `before_5_17.rs`), each for the kernels of its [`Linux`](super::Linux).

/// Defines the programs of a build for `$linux`, with the license and panic handler every
/// object needs. The programs' names are the same in every build: userspace, `tc` and `bpftool`
/// know them by these.
macro_rules! entry_points {
    ($linux:ty) => {
        use aya_ebpf::{
            bindings::{xdp_action::XDP_PASS, TC_ACT_UNSPEC},
            macros::{classifier, xdp},
            programs::{BtfTracePointContext, TcContext, XdpContext},
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

        /// On the `kfree_skb` tracepoint, BTF-typed (`tp_btf`): a DNS packet the kernel
        /// dropped, with why and where (see `programs::observe_drop`). It only reads; the
        /// buffer's fields by plain loads, which the verifier checks against the kernel's BTF.
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "tp_btf/kfree_skb")]
        pub fn dnsloop_drop(ctx: *mut core::ffi::c_void) -> i32 {
            programs::observe_drop::<$linux>(&BtfTracePointContext::new(ctx));
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
