//! Host tests of the parser on crafted frames, property tests, and the fuzz seed corpus.
//!
//! They live inside the library rather than in `dnsloop-ebpf/tests/`: integration tests make
//! cargo build the package's binaries, and the `dnsloop` binary only builds for BPF.

mod classify;
mod common;
mod dns;
mod framing;
// The frame builder of dnsloop-frames, on this build's types (see `dnsloop-ebpf/Cargo.toml`).
#[path = "../../../frames/src/lib.rs"]
mod frames;
mod fuzz_seeds;
mod icmp;
mod properties;
mod truncation;
