//! Host tests of the parser on crafted frames, property tests, and the fuzz seed corpus.

mod classify;
mod common;
mod dns;
mod framing;
mod fuzz_seeds;
mod icmp;
mod properties;
mod truncation;
