//! Feeds arbitrary bytes, as a sequence of packets seen at a node's observation points, through
//! the userspace decode path: decoder, analyzers, and the text and JSON sinks. It fails on a
//! panic anywhere on the way, and on output a terminal or a log shipper could not take (see
//! `dnsloop_core::testkit::fuzzing` for the input's format and the checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dnsloop_core::testkit::fuzzing::decode_packets(data));
