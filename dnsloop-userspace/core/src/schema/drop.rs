//! `"kind": "drop"`: DNS messages the kernel dropped, and why.
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::{finding, observation, present::mnemonic};

/// A DNS message the kernel dropped on this node (its `skb:kfree_skb` tracepoint), with the
/// kernel's reason. The first drop for a reason, place and server is reported at once; while
/// more follow, at most once per `--report-interval`, with their count so far. The message
/// (addresses, id, question) is always the first's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropRecord {
    /// When the latest message counted was dropped.
    pub ts: Timestamp,
    /// Why, as the running kernel names its drop reason: `NETFILTER_DROP` (a firewall rule,
    /// such as a NetworkPolicy), `SOCKET_RCVBUFF` (the server's socket buffer was full),
    /// `NO_SOCKET` (nothing listens on the port), `NEIGH_FAILED`, ...
    pub reason: String,
    /// The kernel function that dropped it, with its offset (`nf_hook_slow+0x9c`); `null` when
    /// the kernel's symbols are hidden.
    pub location: Option<String>,
    /// The network namespace it was dropped in (`node`, `pod kube-system/coredns-...`);
    /// `null` when the tracer does not know it.
    pub namespace: Option<String>,
    /// The device it was on there (`cni0`, `veth1a2b3c`, `if2` in a pod); `null` for none.
    pub device: Option<String>,
    /// The message dropped first: `query` or `reply`.
    pub message: String,
    /// Who sent the message.
    pub src: SocketAddr,
    /// Where it was going.
    pub dst: SocketAddr,
    /// Its DNS message ID.
    pub id: u16,
    /// Its question's name, with the trailing dot; `null` without a question.
    pub qname: Option<String>,
    /// Its question's type; `null` without a question.
    pub qtype: Option<String>,
    /// Messages dropped for this reason, at this place, to or from this server, so far.
    pub count: u64,
    /// The finding in one sentence.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

/// Where a timed-out query (or its reply) was dropped: a timeout's `dropped`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCause {
    /// The kernel's drop reason, as in a `drop` record.
    pub reason: String,
    /// The kernel function that dropped it; `null` when the kernel's symbols are hidden.
    pub location: Option<String>,
    /// The network namespace it was dropped in; `null` when the tracer does not know it.
    pub namespace: Option<String>,
    /// The device it was on there; `null` for none.
    pub device: Option<String>,
}

impl DropCause {
    pub fn new(cause: &observation::DropCause) -> Self {
        Self {
            reason: cause.reason.to_string(),
            location: cause.location.as_deref().map(str::to_owned),
            namespace: cause.place.namespace.as_ref().map(ToString::to_string),
            device: cause.place.device.as_deref().map(str::to_owned),
        }
    }
}

impl DropRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::DropFinding, node: &str) -> Self {
        let DropCause {
            reason,
            location,
            namespace,
            device,
        } = DropCause::new(&found.cause);
        Self {
            ts: found.ts.into(),
            reason,
            location,
            namespace,
            device,
            message: if found.is_response { "reply" } else { "query" }.to_owned(),
            src: found.src,
            dst: found.dst,
            id: found.id,
            qname: found.qname.clone(),
            qtype: found.qtype.map(|qtype| mnemonic::qtype(qtype).into_owned()),
            count: found.count,
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
