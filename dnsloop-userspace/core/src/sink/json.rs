//! One JSON object per line, for log shippers and `jq`: the records [`crate::schema`] declares.
//! Every object has `kind`, `ts` and `node` (the node it was seen on, last); addresses are
//! `ip:port` (`[v6]:port`), codes are names (`A`, `NXDOMAIN`), durations are milliseconds.
use std::{
    io::{self, Write},
    net::SocketAddr,
};

use super::{ipv4_pieces, NodeName, Sink};
use crate::{
    analyzers::Summary,
    decode::MalformedSample,
    finding::{BundleNotice, Finding},
    observation::{Namespace, Observation},
    present::{mnemonic, names::Names, time::Rfc3339Writer},
    schema::{BundleRecord, MalformedRecord, Record, SummaryRecord, SummarySource},
};

/// Writes the records of [`crate::schema`], one per line.
pub struct JsonSink<W> {
    out: W,
    node: NodeName,
    packet_lines: PacketLines,
}

impl<W: Write> JsonSink<W> {
    /// Packet lines write names as `names` says (findings come with theirs written).
    pub fn new(out: W, node: &NodeName, names: &Names) -> Self {
        Self {
            out,
            node: node.clone(),
            packet_lines: PacketLines::for_node(node, names),
        }
    }

    fn line(&mut self, record: &Record) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn finding(&mut self, finding: &Finding) -> io::Result<()> {
        self.line(&Record::finding(finding, self.node.as_str()))?;
        // Findings are rare and someone may be waiting on them.
        self.out.flush()
    }

    fn packet(&mut self, obs: &Observation) -> io::Result<()> {
        let line = self.packet_lines.line(obs)?;
        self.out.write_all(line)
    }

    fn malformed(&mut self, sample: &MalformedSample) -> io::Result<()> {
        self.line(&Record::Malformed(MalformedRecord::new(
            sample,
            self.node.as_str(),
            &self.packet_lines.names,
        )))
    }

    fn bundle(&mut self, notice: &BundleNotice) -> io::Result<()> {
        self.line(&Record::Bundle(BundleRecord::new(
            notice,
            self.node.as_str(),
        )))?;
        self.out.flush()
    }

    fn summary(&mut self, summary: &Summary, source: &SummarySource) -> io::Result<()> {
        let record = SummaryRecord::new(summary, source.clone(), self.node.as_str());
        self.line(&Record::Summary(record))?;
        self.out.flush()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Writes `--packets` lines: the [`PacketRecord`](crate::schema::PacketRecord)s serde would write, byte for byte (a test
/// holds the two to each other), without building one. A node's every DNS packet goes through
/// here, so a line is built by hand in a reused buffer, field by field in the record's order:
/// only the strings that come from the network or the node (names, interfaces, namespaces) go
/// through JSON escaping, and the timestamp's date and time of day are formatted once a
/// second. Serialising a `PacketRecord` instead took 3 to 5 times as long a line (2.2 µs, not
/// 0.46 µs, for a plain query; `packet_lines_cost_less_than_serde` measures it), and 1.5 times
/// the CPU time for all of `analyze --packets --output json` (0.84 s, not 0.55 s, for 200,000
/// packets).
struct PacketLines {
    line: Vec<u8>,
    qname: String,
    names: Names,
    ts: Rfc3339Writer,
    /// `,"node":"<name>"}` and the newline: the same at the end of every line.
    end: Vec<u8>,
}

impl PacketLines {
    fn for_node(node: &NodeName, names: &Names) -> Self {
        let mut end = br#","node":"#.to_vec();
        // Writing a string to memory cannot fail.
        let _ = string(&mut end, node.as_str());
        end.extend_from_slice(b"}\n");
        Self {
            line: Vec::new(),
            qname: String::new(),
            names: names.clone(),
            ts: Rfc3339Writer::default(),
            end,
        }
    }

    /// The line for `obs`, newline included, with the keys `kind`, `ts`, `ifname`, `dir`,
    /// `proto`, `src`, `dst`, `id`, `qr`, `opcode`, `rcode`, `qname`, `qtype`, `size`,
    /// `leaves`, `enters` and `node`.
    fn line(&mut self, obs: &Observation) -> io::Result<&[u8]> {
        let line = &mut self.line;
        line.clear();
        line.extend_from_slice(br#"{"kind":"packet","ts":""#);
        self.ts.write(obs.ts, line);
        line.extend_from_slice(br#"","ifname":"#);
        string(line, &obs.point.ifname)?;
        line.extend_from_slice(br#","dir":"#);
        mnemonic_string(line, obs.point.direction.as_str());
        line.extend_from_slice(br#","proto":"#);
        mnemonic_string(line, obs.transport.as_str());
        line.extend_from_slice(br#","src":"#);
        socket_addr(line, &obs.src)?;
        line.extend_from_slice(br#","dst":"#);
        socket_addr(line, &obs.dst)?;
        line.extend_from_slice(br#","id":"#);
        decimal(line, u64::from(obs.id));
        line.extend_from_slice(if obs.is_response {
            br#","qr":true,"opcode":"#
        } else {
            br#","qr":false,"opcode":"#
        });
        mnemonic_string(line, &mnemonic::opcode(obs.opcode));
        line.extend_from_slice(br#","rcode":"#);
        mnemonic_string(line, &mnemonic::rcode(obs.rcode));
        line.extend_from_slice(br#","qname":"#);
        match &obs.question {
            Some(question) => {
                self.qname.clear();
                question.name.write_presented(&self.names, &mut self.qname);
                string(line, &self.qname)?;
                line.extend_from_slice(br#","qtype":"#);
                mnemonic_string(line, &mnemonic::qtype(question.qtype));
            }
            None => line.extend_from_slice(br#"null,"qtype":null"#),
        }
        line.extend_from_slice(br#","size":"#);
        decimal(line, obs.size as u64);
        line.extend_from_slice(br#","leaves":"#);
        namespace(line, obs.point.leaves.as_ref())?;
        line.extend_from_slice(br#","enters":"#);
        namespace(line, obs.point.enters.as_ref())?;
        line.extend_from_slice(&self.end);
        Ok(&self.line)
    }
}

/// `text` as a JSON string. Nearly every one (an interface, a namespace, a name) has no byte
/// JSON escapes, which a scan without a branch per byte shows faster than serde_json's own
/// byte-by-byte scan: it is quoted as it is. serde_json writes the others.
fn string(out: &mut Vec<u8>, text: &str) -> io::Result<()> {
    let escapes = text.as_bytes().chunks(32).any(|block| {
        block.iter().fold(false, |found, &byte| {
            found | (byte < 0x20) | (byte == b'"') | (byte == b'\\')
        })
    });
    if escapes {
        return serde_json::to_writer(out, text).map_err(io::Error::from);
    }
    quoted(out, text);
    Ok(())
}

/// A mnemonic (`egress`, `udp`, `QUERY`, `NOERROR`, `A`, `TYPE65280`) as a JSON string. None
/// has a byte JSON escapes (a test goes through them all), so it is quoted as it is, without
/// even the scan for those bytes: five of a packet line's strings are mnemonics.
fn mnemonic_string(out: &mut Vec<u8>, mnemonic: &str) {
    quoted(out, mnemonic);
}

/// `text`, which has no byte JSON escapes, as a JSON string.
fn quoted(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

fn namespace(out: &mut Vec<u8>, namespace: Option<&Namespace>) -> io::Result<()> {
    match namespace {
        Some(namespace) => string(out, &namespace.0),
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

/// `addr` as the JSON string of its `Display` form (`ip:port`, `[v6]:port`).
fn socket_addr(out: &mut Vec<u8>, addr: &SocketAddr) -> io::Result<()> {
    out.push(b'"');
    match addr {
        SocketAddr::V4(addr) => ipv4_pieces(addr, |piece| out.extend_from_slice(piece.as_bytes())),
        SocketAddr::V6(addr) => write!(out, "{addr}")?,
    }
    out.push(b'"');
    Ok(())
}

fn decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests;
