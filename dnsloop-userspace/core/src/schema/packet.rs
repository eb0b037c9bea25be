//! `"kind": "packet"`: every DNS message seen, with `--packets`.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{
    observation::Observation,
    present::{mnemonic, names::Names},
};

/// One DNS message seen at one interface and direction (`--packets`): a packet crossing several
/// hops is shown on each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketRecord {
    /// When the packet was seen.
    pub ts: Timestamp,
    /// The interface it was seen on.
    pub ifname: String,
    /// `ingress` or `egress`.
    pub dir: String,
    /// `udp` or `tcp`.
    pub proto: String,
    /// Who sent it.
    pub src: SocketAddr,
    /// Where it was going.
    pub dst: SocketAddr,
    /// The DNS message ID.
    pub id: u16,
    /// Whether it is a response.
    pub qr: bool,
    /// The opcode's name (`QUERY`, `NOTIFY`), or its number.
    pub opcode: String,
    /// The response code, EDNS extended bits included (`NOERROR`, `NXDOMAIN`, `RCODE4000`);
    /// `NOERROR` in a query.
    pub rcode: String,
    /// The first question's name, with its trailing dot; `null` for a message without one.
    pub qname: Option<String>,
    /// The first question's type; `null` for a message without one.
    pub qtype: Option<String>,
    /// Bytes of the DNS message.
    pub size: usize,
    /// The namespace the packet left here, as in a loop's path; `null` when not watched.
    pub leaves: Option<String>,
    /// The namespace the packet entered here; `null` when not watched.
    pub enters: Option<String>,
    /// The node this was seen on.
    pub node: String,
}

impl PacketRecord {
    /// `obs`, seen on `node`, its name written as `names` says.
    pub fn new(obs: &Observation, node: &str, names: &Names) -> Self {
        Self {
            ts: obs.ts.into(),
            ifname: obs.point.ifname.to_string(),
            dir: obs.point.direction.as_str().to_owned(),
            proto: obs.transport.as_str().to_owned(),
            src: obs.src,
            dst: obs.dst,
            id: obs.id,
            qr: obs.is_response,
            opcode: mnemonic::opcode(obs.opcode).into_owned(),
            rcode: mnemonic::rcode(obs.rcode).into_owned(),
            qname: obs
                .question
                .as_ref()
                .map(|question| question.name.presented(names)),
            qtype: obs
                .question
                .as_ref()
                .map(|question| mnemonic::qtype(question.qtype).into_owned()),
            size: obs.size,
            leaves: obs.point.leaves.as_ref().map(ToString::to_string),
            enters: obs.point.enters.as_ref().map(ToString::to_string),
            node: node.to_owned(),
        }
    }
}
