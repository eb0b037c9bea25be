//! `"kind": "probe"`: what `dnsloop probe --output json` concluded.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The outcome of `dnsloop probe`: the probes sent (`HINFO <random>.<random>.<zone>`, the
/// question CoreDNS's `loop` plugin asks) and, with `--trace`, whether one came back. With
/// `--trace` the probe's `loop` records come first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// The resolver probed.
    pub server: SocketAddr,
    /// `udp` or `tcp`.
    pub proto: String,
    /// The probe's name, with its trailing dot.
    pub qname: String,
    /// Always `HINFO`.
    pub qtype: String,
    /// One per probe sent, in order.
    pub results: Vec<ProbeResult>,
    /// Whether the node was watched while the probes travelled (`--trace`).
    pub traced: bool,
    /// Whether a probe came back (a loop); `null` when not traced.
    pub looped: Option<bool>,
    /// How many times the probe came back, at most; `null` when not traced.
    pub came_back: Option<u64>,
}

/// What one probe got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// The probe's DNS message ID.
    pub id: u16,
    /// The answer's response code; `null` when no answer came.
    pub rcode: Option<String>,
    /// Milliseconds until the answer came, or until giving up.
    pub ms: f64,
    /// Why the probe could not be sent or its answer read; `null` if it could.
    pub error: Option<String>,
}
