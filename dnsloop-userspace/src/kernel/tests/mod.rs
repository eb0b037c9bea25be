//! The real kernel programs, loaded as `dnsloop trace` loads them, run on crafted frames with
//! `BPF_PROG_TEST_RUN`: what they count, what they stream to userspace, and that they hand every
//! frame on untouched.
//!
//! Each test loads programs of its own, so its maps start empty and the counts it checks are
//! exact. The kernel runs a test frame on the loopback device of the calling thread's namespace
//! (no `ifindex` is given in the context), so records name loopback and that namespace's cookie.
//!
//! One module per concern (`counting`, `loops`, `streaming`, `query_table`, `parsing`); what
//! they share, the programs of both builds loaded and run, is in `kit`.
mod counting;
mod kit;
mod loops;
mod parsing;
mod query_table;
mod streaming;
