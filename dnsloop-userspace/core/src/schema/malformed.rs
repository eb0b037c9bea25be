//! `"kind": "malformed"`: a sample of the packets on DNS ports that could not be parsed.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{
    decode::MalformedSample,
    present::{hex, names::Names},
};

/// A packet on a DNS port that could not be parsed, shown at most once per reason per second
/// (every one is counted in the summary's `malformed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedRecord {
    /// When the packet was seen.
    pub ts: Timestamp,
    /// The interface it was seen on.
    pub ifname: String,
    /// `ingress` or `egress`.
    pub dir: String,
    /// Why it could not be parsed (`dns_compression_pointer`, `bad_ihl`, ...).
    pub reason: String,
    /// Who sent it, when the headers up to the transport parsed; else `null`.
    pub src: Option<SocketAddr>,
    /// Where it was going, when the headers up to the transport parsed; else `null`.
    pub dst: Option<SocketAddr>,
    /// The first bytes of the frame (at most 96), in lowercase hex; empty when names are
    /// redacted (`--redact-names`): they may hold one.
    pub head: String,
    /// The node this was seen on.
    pub node: String,
}

impl MalformedRecord {
    /// `sample`, seen on `node`; its bytes left out where `names` are redacted.
    pub fn new(sample: &MalformedSample, node: &str, names: &Names) -> Self {
        Self {
            ts: sample.ts.into(),
            ifname: sample.ifname.to_string(),
            dir: sample.direction.as_str().to_owned(),
            reason: sample.reason.as_str().to_owned(),
            src: sample.addresses.map(|(src, _)| src),
            dst: sample.addresses.map(|(_, dst)| dst),
            head: if names.is_redacted() {
                String::new()
            } else {
                hex(&sample.head)
            },
            node: node.to_owned(),
        }
    }
}
