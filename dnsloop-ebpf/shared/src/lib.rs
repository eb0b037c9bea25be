//! Everything the kernel programs and userspace must agree on: the `no_std` packet/DNS parser,
//! the `#[repr(C)]` records and map keys that cross the kernel boundary (one module per table or
//! record), the question table's state machine that finds a loop, and the names the programs
//! and maps have in the BPF object.
//!
//! The same source compiles for `bpfel-unknown-none` (inside the programs) and for the host
//! (userspace decoding, unit/property tests, fuzzing), so there is exactly one parser.
//!
//! Every shared record is `#[repr(C)]` with explicit padding, so that its layout is the same on
//! both sides and no uninitialised byte ever reaches userspace; with feature `user` each is also
//! an `aya::Pod`.
#![cfg_attr(not(test), no_std)]

/// Makes shared records `aya::Pod` for userspace (feature `user`).
#[cfg(feature = "user")]
macro_rules! pod {
    ($($record:ident),+ $(,)?) => {
        $(
            // SAFETY: plain-old-data, `#[repr(C)]`, every byte (padding included) is
            // initialised: each record's padding test checks it.
            unsafe impl aya::Pod for $record {}
        )+
    };
}
#[cfg(feature = "user")]
pub(crate) use pod;

pub mod config;
pub mod counter;
pub mod drop;
pub mod forwarder;
pub mod latency_buckets;
pub mod names;
pub mod parse;
pub mod point;
pub mod query;
pub mod question;
pub mod record;
pub mod server;
pub mod stores;
pub mod truncation;
