//! dnsloop's analysis core: everything between a packet and a finding on the page, with no
//! kernel in sight. It builds and tests without the BPF toolchain.
//!
//! The pipeline, in data-flow order: a [`source`] yields raw packets (a capture file here; the
//! kernel's ring buffer in `dnsloop-userspace`), [`points`] places each on an observation point,
//! the [`decode`]r turns it into an [`observation`], the [`analyzers`] turn observations into
//! [`finding`]s, [`enrich`] adds the node's evidence, and a [`sink`] writes them; [`pipeline`]
//! drives the whole. The analyzers never learn which source a packet came from, so live
//! tracing and a capture agree by construction. [`doctor`] checks a node's DNS configuration
//! from its files. [`schema`] declares every JSON record dnsloop prints. [`bundle`] writes a
//! capture bundle, which `capture` and the flight [`recorder`] leave behind. Where no node
//! says which addresses its namespaces hold (a capture), [`answered_from`] learns them from
//! the replies the capture shows. [`present`] names what the analyzers, the schema and the
//! sinks show people (DNS codes, names as sent or redacted, times, probes) alike. `testkit`
//! is what the tests build on, the fuzzer's decode path among it.
//!
//! Modules use only those below them, bottom first: `present`; `observation`, `finding`;
//! `points`, `source`, `decode`; `analyzers`, `answered_from`, `enrich`; `schema`; `sink`;
//! `doctor`; `bundle`, `recorder`; `pipeline`; and `testkit` for the tests. A test in
//! `layers.rs` holds them to it.
pub mod analyzers;
pub mod answered_from;
pub mod bundle;
pub mod decode;
pub mod doctor;
pub mod enrich;
pub mod finding;
#[cfg(test)]
mod layers;
pub mod observation;
pub mod pipeline;
pub mod points;
pub mod present;
pub mod recorder;
pub mod schema;
pub mod sink;
pub mod source;
#[cfg(any(test, feature = "fuzzing"))]
pub mod testkit;

/// A DNS name as it was sent, and its presentation format (`\DDD` escapes, as dig writes it).
pub use observation::DnsName;
