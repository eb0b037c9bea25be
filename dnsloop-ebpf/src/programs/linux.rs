//! What the programs do differently on the kernels they are built for. Linux 5.17 brought both
//! `bpf_loop` and the drop reason of the `kfree_skb` tracepoint, so two builds cover every
//! kernel from 5.10 on: `dnsloop` ([`Linux517`]) and `dnsloop-before-5-17` ([`Linux510`]), each
//! from its own entry points (see `main.rs`); userspace loads the one the kernel can take.
use core::ops::ControlFlow;

use aya_ebpf::helpers::generated::bpf_loop;
use dnsloop_shared::parse::{
    parse_dns_with, ByteWalk, DnsHeader, DnsSummary, Malformed, Message, NameWalk, NameWalker,
    Question, DNS_BUF_LEN, MAX_NAME_LABEL_STEPS, MAX_TCP_MESSAGES,
};

use super::maps;

/// The kernel the programs are built for.
pub trait Linux {
    /// Whether the `kfree_skb` tracepoint gives the drop's reason, as its third argument.
    const DROP_REASONS: bool;

    /// Whether a message's question is followed apart from its inspection, by `follow` below
    /// (the question passed on in `PacketScratch`), rather than within it.
    const FOLLOW_APART: bool;

    /// Calls `inspect(index)` then `follow()` for each of a packet's first `count` DNS
    /// messages (at most `MAX_TCP_MESSAGES`). `inspect` always continues: its type is the one
    /// `bpf_loop`'s body has, so that it is the body itself, with no frame around it.
    fn each_message<I: FnMut(usize) -> ControlFlow<()>, F: FnMut()>(
        count: u32,
        inspect: I,
        follow: F,
    );

    /// Parses the first `len` bytes of `buffer`, which is `DNS_BUFFER`'s, with `walk`; `None`
    /// if it could not.
    fn parse_dns(
        buffer: &[u8; DNS_BUF_LEN],
        len: usize,
        walk: &mut NameWalk,
    ) -> Option<Result<DnsSummary, Malformed>>;
}

/// Linux 5.17 and later: both loops run in `bpf_loop`, whose body the verifier checks once.
pub struct Linux517;

impl Linux for Linux517 {
    const DROP_REASONS: bool = true;
    const FOLLOW_APART: bool = false;

    /// `inspect` follows the question itself: `follow` has nothing to do.
    #[inline(always)]
    fn each_message<I: FnMut(usize) -> ControlFlow<()>, F: FnMut()>(
        count: u32,
        inspect: I,
        _follow: F,
    ) {
        bounded_loop(count, inspect);
    }

    #[inline(always)]
    fn parse_dns(
        buffer: &[u8; DNS_BUF_LEN],
        len: usize,
        walk: &mut NameWalk,
    ) -> Option<Result<DnsSummary, Malformed>> {
        *walk = NameWalk::default();
        Some(parse_dns_with(buffer, len, walk, BpfLoopWalk))
    }
}

/// Linux 5.10 to 5.16, without `bpf_loop`. The verifier then follows each iteration of a loop:
/// the messages' loop is unrolled (a few messages, each inspected, then its question followed,
/// in calls of their own, whose frames the next ones reuse) and a message is parsed, its name
/// walked byte by byte, in [`dnsloop_parse_dns`], a function the verifier checks once, apart
/// from its callers.
pub struct Linux510;

impl Linux for Linux510 {
    const DROP_REASONS: bool = false;
    /// Each in a BPF function of its own: together their frames pass the 512-byte stack.
    const FOLLOW_APART: bool = true;

    #[inline(always)]
    fn each_message<I: FnMut(usize) -> ControlFlow<()>, F: FnMut()>(
        count: u32,
        mut inspect: I,
        mut follow: F,
    ) {
        for index in 0..MAX_TCP_MESSAGES {
            if index as u32 >= count {
                return;
            }
            call_apart(|| {
                let _ = inspect(index);
            });
            call_apart(&mut follow);
        }
    }

    /// `buffer` and `walk` go unused: the function reads `DNS_BUFFER`, which `buffer` is, and
    /// walks in `NAME_WALK`.
    #[inline(always)]
    fn parse_dns(
        _buffer: &[u8; DNS_BUF_LEN],
        len: usize,
        _walk: &mut NameWalk,
    ) -> Option<Result<DnsSummary, Malformed>> {
        let walk = maps::NAME_WALK.get_ptr_mut(0)?;
        let parsed = maps::PARSED.get_ptr(0)?;
        // Started here, not in the function: there the compiler would know the walk's first
        // values and keep them in registers, and the verifier, tracking them exactly, would
        // tell apart every byte's state instead of pruning them (past its budget on 5.10).
        // SAFETY: the per-CPU values belong to this program run until it returns, and no
        // reference to them outlives its statement.
        unsafe { *walk = NameWalk::default() };
        if dnsloop_parse_dns(len as u64) == 0 {
            return None;
        }
        // SAFETY: as above; and the call wrote what its outcome says.
        let parsed = unsafe { &*parsed };
        Some(match parsed.outcome {
            ParsedMessage::QUESTION => Ok(DnsSummary {
                header: parsed.header,
                question: Some(parsed.question),
            }),
            ParsedMessage::NO_QUESTION => Ok(DnsSummary {
                header: parsed.header,
                question: None,
            }),
            _ => Err(parsed.malformed),
        })
    }
}

/// What [`dnsloop_parse_dns`] parsed. Unlike a `Result<DnsSummary, Malformed>`, each of its
/// outcomes writes only fields that hold values: a copy of the `Result` would also store the
/// bytes a variant leaves unset, from registers never written on that path, which the verifier
/// refuses to read.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ParsedMessage {
    /// [`Self::QUESTION`], [`Self::NO_QUESTION`], or else malformed.
    outcome: u8,
    malformed: Malformed,
    header: DnsHeader,
    question: Question,
}

impl ParsedMessage {
    const QUESTION: u8 = 1;
    const NO_QUESTION: u8 = 2;
    const MALFORMED: u8 = 3;
}

/// Calls `body` in a BPF function of its own: inlined, the bodies of every unrolled iteration
/// would share one stack frame, far beyond the 512-byte stack.
#[inline(never)]
fn call_apart<F: FnOnce()>(body: F) {
    body();
}

/// Calls `body(0)`, `body(1)`, ... up to `body(iterations - 1)`, or until it breaks.
///
/// This is `bpf_loop` (Linux 5.17+). An unrolled loop would make the verifier check `body` once
/// per iteration, and with a DNS parse in the body (thousands of instructions to verify)
/// a few iterations exhaust its budget; here it checks the body until its state converges.
#[inline(always)]
fn bounded_loop<F: FnMut(usize) -> ControlFlow<()>>(iterations: u32, mut body: F) {
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

/// The name walk of [`Linux517`]: one `bpf_loop` iteration per label.
struct BpfLoopWalk;

impl NameWalker for BpfLoopWalk {
    #[inline(always)]
    fn walk(self, walk: &mut NameWalk, msg: &Message) {
        bounded_loop(MAX_NAME_LABEL_STEPS, |_| walk.label_step(msg));
    }
}

/// Parses the `len`-byte message in `DNS_BUFFER` into `PARSED`, walking its name byte by byte
/// with `NAME_WALK`; 1 once it has, 0 if a map had no slot.
///
/// A global function (Linux 5.6+): the verifier checks it once, on its own, and at its calls
/// knows only that it returns a number. Its arguments may only be numbers (or the context),
/// hence the maps rather than pointers; and it returns its parse in a map of its own, which the
/// caller's references do not cover. Read back from a map, the parse has every byte set: on
/// the stack a message without a question would leave the question's bytes unwritten, and
/// Linux 5.10's verifier, which cannot tell that the code reading them never runs then,
/// refuses the read.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn dnsloop_parse_dns(len: u64) -> u64 {
    let (Some(buffer), Some(walk), Some(parsed)) = (
        maps::DNS_BUFFER.get_ptr(0),
        maps::NAME_WALK.get_ptr_mut(0),
        maps::PARSED.get_ptr_mut(0),
    ) else {
        return 0;
    };
    // SAFETY: the per-CPU values belong to this program run until it returns, and no reference
    // to `NAME_WALK`'s or `PARSED`'s is alive outside this function.
    let (buffer, walk, parsed) = unsafe { (&*buffer, &mut *walk, &mut *parsed) };
    match parse_dns_with(buffer, len as usize, walk, ByteWalk) {
        Ok(summary) => {
            parsed.header = summary.header;
            parsed.outcome = match summary.question {
                Some(question) => {
                    parsed.question = question;
                    ParsedMessage::QUESTION
                }
                None => ParsedMessage::NO_QUESTION,
            };
        }
        Err(reason) => {
            parsed.malformed = reason;
            parsed.outcome = ParsedMessage::MALFORMED;
        }
    }
    1
}
