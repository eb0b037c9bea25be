//! The `packet` lines of `dnsloop trace --packets --output json`: one per DNS message seen, at
//! each interface and direction it crossed.
use dnsloop_core::schema::{PacketRecord, Record};

use crate::findings::Trace;

/// The `packet` lines of a finished run, in the order they were printed.
pub fn packet_lines(trace: &Trace) -> Vec<PacketRecord> {
    trace
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Packet(packet) => Some(packet.clone()),
            _ => None,
        })
        .collect()
}
