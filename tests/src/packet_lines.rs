//! The `packet` lines of `dnsloop trace --packets --output json`: one per DNS message seen, at
//! each interface and direction it crossed.
use anyhow::{Context as _, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::findings::{Timestamp, Trace};

/// One `packet` line. Addresses are kept as printed (`ip:port`, `[v6]:port`), since how they
/// are printed is part of what the tests check.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct PacketLine {
    pub ts: Timestamp,
    pub ifname: String,
    /// `ingress` or `egress`.
    pub dir: String,
    /// `udp` or `tcp`.
    pub proto: String,
    pub src: String,
    pub dst: String,
    pub id: u16,
    /// Whether it is a response.
    pub qr: bool,
    pub opcode: String,
    pub rcode: String,
    /// The first question's name, with its trailing dot; `None` for a message without one.
    pub qname: Option<String>,
    pub qtype: Option<String>,
    /// Bytes of the DNS message.
    pub size: usize,
    /// The namespaces the packet left and entered there, as in a loop's path.
    pub leaves: Option<String>,
    pub enters: Option<String>,
}

/// The `packet` lines of a finished run, in the order they were printed.
pub fn packet_lines(trace: &Trace) -> Result<Vec<PacketLine>> {
    let mut packets = Vec::new();
    for (number, line) in trace.stdout.lines().enumerate() {
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("stdout line {} is not JSON: {line}", number + 1))?;
        if value["kind"] == "packet" {
            packets.push(
                serde_json::from_value(value)
                    .with_context(|| format!("stdout line {}: {line}", number + 1))?,
            );
        }
    }
    Ok(packets)
}
