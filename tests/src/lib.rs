//! The node lab and what the end-to-end tests need to drive `dnsloop` on it.
//! `cargo xtask lab` and `cargo xtask demo` use the same code.
pub mod dead_upstream;
pub mod dns_query;
pub mod exchange;
pub mod findings;
pub mod in_netns;
pub mod lab;
pub mod or_fail;
pub mod packet_lines;
pub mod privilege;
pub mod scrape;
pub mod test_name;
pub mod tracer;
pub mod tshark;
pub mod wait;

/// Environment variable naming the `dnsloop` binary the end-to-end tests run
/// (`cargo xtask test` sets it).
pub const DNSLOOP_BIN_ENV: &str = "DNSLOOP_BIN";
