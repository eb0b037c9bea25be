//! Where results go: a person at a terminal, or a log shipper reading JSON lines.
mod json;
mod node_name;
mod text;

use std::io::{self, Write};

use crate::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
    observation::Observation,
    present::names::Names,
    schema::SummarySource,
};

pub use json::JsonSink;
pub use node_name::NodeName;
pub use text::TextSink;

/// How results are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// One line per finding, for a person at a terminal.
    #[default]
    Text,
    /// One JSON object per line, for a log shipper.
    Json,
}

pub trait Sink {
    fn finding(&mut self, finding: &Finding) -> io::Result<()>;

    /// One decoded DNS message, for those who asked to see every packet.
    fn packet(&mut self, obs: &Observation) -> io::Result<()>;

    /// A sample of the malformed packets on DNS ports (all are counted in the summary).
    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()>;

    /// Where `trace --record` puts the packets of the finding just written.
    fn bundle(&mut self, notice: &BundleNotice) -> io::Result<()>;

    /// The end-of-run summary, written once: the analyzers' numbers, and those of the `source`
    /// the packets came from (the kernel's counters, or the capture file's), shown alongside.
    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()>;

    /// Hands on what was written so far. Called once per batch of packets: a writer may buffer
    /// within a batch, so that `--packets` costs one write per batch rather than one per line.
    fn flush(&mut self) -> io::Result<()>;
}

/// What a sink writing to stdout buffers between flushes: with `--packets` a batch is hundreds
/// of lines of about 330 bytes.
pub const STDOUT_BUFFER: usize = 64 * 1024;

/// The sink for `format`; JSON objects name `node`, and packet lines write names as `names`
/// says.
pub fn for_format<'a>(
    format: OutputFormat,
    node: &NodeName,
    names: &Names,
    out: impl Write + 'a,
) -> Box<dyn Sink + 'a> {
    match format {
        OutputFormat::Text => Box::new(TextSink::new(out, names)),
        OutputFormat::Json => Box::new(JsonSink::new(out, node, names)),
    }
}

/// `addr` as `Display` writes it (`10.244.0.2:53`), piece by piece to `push`: `Display` takes
/// the formatting machinery once for each number, and the sinks write two addresses a packet.
fn ipv4_pieces(addr: &std::net::SocketAddrV4, mut push: impl FnMut(&str)) {
    let mut digits = itoa::Buffer::new();
    for (at, octet) in addr.ip().octets().into_iter().enumerate() {
        if at > 0 {
            push(".");
        }
        push(digits.format(octet));
    }
    push(":");
    push(digits.format(addr.port()));
}

#[cfg(test)]
mod ipv4_tests {
    use std::net::SocketAddrV4;

    use super::ipv4_pieces;

    #[test]
    fn ipv4_addresses_are_written_as_they_display() {
        for text in [
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.244.0.2:53",
            "169.254.25.10:9",
        ] {
            let addr: SocketAddrV4 = text.parse().expect("an address");
            let mut written = String::new();
            ipv4_pieces(&addr, |piece| written.push_str(piece));
            assert_eq!(written, addr.to_string());
        }
    }
}
