//! A loop the verifier checks once, however many iterations it runs.
use core::ops::ControlFlow;

use aya_ebpf::helpers::generated::bpf_loop;
use dnsloop_ebpf::parse::Steps;

/// Calls `body(0)`, `body(1)`, ... up to `body(iterations - 1)`, or until it breaks.
///
/// This is `bpf_loop` (Linux 5.17+). An unrolled loop would make the verifier check `body` once
/// per iteration, and with a DNS parse in the body (thousands of instructions to verify)
/// a few iterations exhaust its budget; here it checks the body until its state converges.
#[inline(always)]
pub fn bounded_loop<F: FnMut(usize) -> ControlFlow<()>>(iterations: u32, mut body: F) {
    extern "C" fn trampoline<F: FnMut(usize) -> ControlFlow<()>>(
        index: u64,
        context: *mut core::ffi::c_void,
    ) -> i64 {
        // SAFETY: `context` is the `&mut F` handed to bpf_loop below, alive during that call.
        let body = unsafe { &mut *context.cast::<F>() };
        match body(index as usize) {
            ControlFlow::Continue(()) => 0,
            ControlFlow::Break(()) => 1,
        }
    }
    // SAFETY: bpf_loop calls `trampoline::<F>` with our context, only during this call.
    unsafe {
        bpf_loop(
            iterations,
            trampoline::<F> as *mut core::ffi::c_void,
            (&mut body as *mut F).cast(),
            0,
        );
    }
}

/// The parser's name walk, one `bpf_loop` iteration per label.
pub struct BpfSteps;

impl Steps for BpfSteps {
    #[inline(always)]
    fn run<F: FnMut() -> ControlFlow<()>>(self, max: u32, mut step: F) {
        bounded_loop(max, |_| step());
    }
}
