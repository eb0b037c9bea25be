//! The end-to-end tests: one binary, one module per area, so a test's path is `area::test` and
//! `cargo test -p dnsloop-tests --test e2e area::` runs one area. Tests run in parallel threads;
//! those that bring up a lab take turns ([`dnsloop_tests::lab::Lab::builder`]).
mod alerts;
mod analyze;
mod capture;
mod capture_corpus;
mod cluster;
mod conntrack_clashes;
mod conntrack_evidence;
mod deploy;
mod detect;
mod drops;
mod lab;
mod lifecycle;
mod metrics;
mod packets;
mod probe;
mod record;
mod redact;
mod slow;
mod storm;
mod trace;
mod tshark;
