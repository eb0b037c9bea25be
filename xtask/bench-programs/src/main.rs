//! The floor dnsloop's kernel cost is measured against: a TC classifier that returns at once,
//! attached where dnsloop's programs are, on the same load.
#![no_std]
#![no_main]

use aya_ebpf::{bindings::TC_ACT_UNSPEC, macros::classifier, programs::TcContext};

#[classifier]
pub fn bench_empty(_ctx: TcContext) -> i32 {
    TC_ACT_UNSPEC
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
