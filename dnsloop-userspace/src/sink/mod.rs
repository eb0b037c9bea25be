//! Where results go: a person at a terminal, or a log shipper reading JSON lines.
mod ipv4;
mod json;
pub mod pcapng;
#[cfg(test)]
mod samples;
mod text;
mod time;

use std::io::{self, Write};

use dnsloop_ebpf::parse::Probe;
use serde_json::Value;

use crate::{
    analyze::Summary, cli::OutputFormat, decode::MalformedSample, finding::Finding,
    observation::Observation,
};

pub use json::JsonSink;
pub use text::TextSink;
pub use time::rfc3339;

pub trait Sink {
    fn finding(&mut self, finding: &Finding) -> io::Result<()>;

    /// One decoded DNS message, for those who asked to see every packet.
    fn packet(&mut self, obs: &Observation) -> io::Result<()>;

    /// A sample of the malformed packets on DNS ports (all are counted in the summary).
    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()>;

    /// The end-of-run summary, written once. `extra` is an object of the caller's own numbers
    /// (interface counts, lost events), shown alongside.
    fn summary(&mut self, summary: &Summary, extra: &Value) -> io::Result<()>;

    /// Hands on what was written so far. Called once per batch of packets: a writer may buffer
    /// within a batch, so that `--packets` costs one write per batch rather than one per line.
    fn flush(&mut self) -> io::Result<()>;
}

pub fn for_format<'a>(format: OutputFormat, out: impl Write + 'a) -> Box<dyn Sink + 'a> {
    match format {
        OutputFormat::Text => Box::new(TextSink::new(out)),
        OutputFormat::Json => Box::new(JsonSink::new(out)),
    }
}

/// The name of a loop-detection probe, `None` for an ordinary question.
fn probe_name(probe: Probe) -> Option<&'static str> {
    match probe {
        Probe::None => None,
        Probe::CoreDns => Some("coredns"),
        Probe::Dnsmasq => Some("dnsmasq"),
    }
}

/// Bytes as lowercase hex, two digits each.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut text, byte| {
            use std::fmt::Write as _;
            let _ = write!(text, "{byte:02x}");
            text
        })
}
