//! `"kind": "fragmented_reply_lost"`: replies lost to fragmentation.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{DropCause, Hop, Timestamp};
use crate::{finding, present::mnemonic};

/// A reply larger than its path's MTU went in fragments, and a host on its way held the first
/// one and gave up waiting for the rest: the kernel dropped it as `FRAG_REASM_TIMEOUT`
/// (`trace`), or the host sent back an ICMP "fragment reassembly time exceeded" quoting it
/// (`analyze`: a capture shows no drops). The client got no answer; its query may not even time
/// out, as the first fragment carries the reply's header and question. Nothing else makes this
/// finding: a large reply delivered whole never does. The first from a server to a client is
/// reported at once, the next ones within the report interval together, counted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentationRecord {
    /// When the host gave up the (latest) reply.
    pub ts: Timestamp,
    /// The reply's destination: the client of the query it answered.
    pub client: SocketAddr,
    /// The server that sent the reply.
    pub server: SocketAddr,
    /// The DNS message ID of the first reply reported.
    pub id: u16,
    /// Replies lost this reports: 1, or all so far from this server to this client.
    pub count: u64,
    /// The question's name, with its trailing dot.
    pub qname: String,
    /// The question's type.
    pub qtype: String,
    /// Bytes of the whole reply, as its first fragment's UDP header declares them; `null` when
    /// the drop did not show that header.
    pub size: Option<usize>,
    /// Bytes of the first fragment on the wire, IP header included: the MTU of the link where
    /// the reply was cut was at least this. `null` as for `size`.
    pub first_fragment: Option<usize>,
    /// The UDP size the client's query advertised in its EDNS (OPT) record: the reply size it
    /// invited. `null` unless the query was seen advertising more than 1232 bytes (`analyze`,
    /// `trace --packets` or `--slow`).
    pub edns_udp_size: Option<u16>,
    /// Where the reply (or its first fragment) was seen on its way, in order; empty when it
    /// was not seen (a default `trace` streams neither).
    pub seen: Vec<Hop>,
    /// The host that gave up, and how: `FRAG_REASM_TIMEOUT`, where.
    pub lost: DropCause,
    /// The finding in one sentence, with the fix.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

impl FragmentationRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::FragmentationFinding, node: &str) -> Self {
        Self {
            ts: found.ts.into(),
            client: found.client,
            server: found.server,
            id: found.id,
            count: found.count,
            qname: found.qname.clone(),
            qtype: mnemonic::qtype(found.qtype).into_owned(),
            size: found.sizes.map(|sizes| sizes.message),
            first_fragment: found.sizes.map(|sizes| sizes.first_fragment),
            edns_udp_size: found.edns_udp_size,
            seen: found.seen.iter().map(Hop::new).collect(),
            lost: DropCause::new(&found.lost),
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
