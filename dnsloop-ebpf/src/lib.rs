//! Everything the kernel programs and userspace must agree on: the `no_std` packet/DNS parser and
//! the `#[repr(C)]` records and map keys that cross the kernel boundary.
//!
//! The same source compiles for `bpfel-unknown-none` (inside the programs) and for the host
//! (userspace decoding, unit/property tests, fuzzing), so there is exactly one parser.
#![cfg_attr(not(test), no_std)]

pub mod event;
#[cfg(any(test, feature = "frames"))]
pub mod frames;
pub mod latency;
pub mod parse;
pub mod stores;
