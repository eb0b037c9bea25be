//! What the crate's tests build on, in one place: observations written the way a packet walks
//! through the lab's node ([`observations`]), findings, packets and summaries for the sinks
//! and the recorder ([`samples`]), a sample of every record printed ([`records`]), and the
//! decode path as the fuzzer drives it ([`fuzzing`], also built with the `fuzzing` feature for
//! `dnsloop-userspace/core/fuzz`).
pub mod fuzzing;
#[cfg(test)]
pub mod observations;
#[cfg(test)]
pub mod records;
#[cfg(test)]
pub mod samples;
