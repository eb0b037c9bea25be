//! `"kind": "search_list_waste"`: queries a client's search list wasted.
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::{summary::millis, Timestamp};
use crate::{finding, present::mnemonic};

/// A client's lookups that asked the name with each suffix of its search list first (`ndots:5`
/// in Kubernetes: `api.example.com.default.svc.cluster.local.`, ...), each answered NXDOMAIN,
/// before the name itself. Reported when the client's first such lookup ends, then at most
/// once per report interval with what it wasted since its previous report, and at the end.
/// Seen where every DNS packet is analysed: `analyze`, and `trace` with `--slow` or `--packets`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchListRecord {
    /// When the latest lookup counted ended, or the run did.
    pub ts: Timestamp,
    /// Since when this counts: the client's first query seen, or its previous report.
    pub since: Timestamp,
    /// The client's address.
    pub client: IpAddr,
    /// The namespace its queries came from (`pod default/web`); `null` when it is not watched.
    pub client_namespace: Option<String>,
    /// The server its latest wasteful lookup asked, as it addressed it.
    pub server: SocketAddr,
    /// The client's queries answered since `since`, wasted or not.
    pub queries: u64,
    /// Of those, the search-list expansions answered NXDOMAIN before the name they expanded.
    pub wasted: u64,
    /// `wasted` over `queries`, 0 to 1.
    pub wasted_share: f64,
    /// Lookups that wasted queries.
    pub lookups: u64,
    /// What the wasted queries added to those lookups together, in milliseconds: from each
    /// one's first expansion to its name being asked.
    pub extra_ms: f64,
    /// The lookup the search list delayed most.
    pub slowest: SlowestSearch,
    /// The finding in one sentence, with the fixes.
    pub summary: String,
    /// The node this was seen on.
    pub node: String,
}

/// The lookup a search list delayed most.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowestSearch {
    /// The name at last asked, with its trailing dot.
    pub qname: String,
    /// The question's type.
    pub qtype: String,
    /// Expansions asked before it.
    pub wasted: u64,
    /// From the first of them to the name being asked, in milliseconds.
    pub extra_ms: f64,
}

impl SearchListRecord {
    /// `found`, seen on `node`.
    pub fn new(found: &finding::SearchListFinding, node: &str) -> Self {
        let slowest = &found.slowest;
        Self {
            ts: found.ts.into(),
            since: found.since.into(),
            client: found.client,
            client_namespace: found.client_namespace.as_ref().map(ToString::to_string),
            server: found.server,
            queries: found.queries,
            wasted: found.wasted,
            wasted_share: found.wasted_share(),
            lookups: found.lookups,
            extra_ms: millis(found.extra),
            slowest: SlowestSearch {
                qname: slowest.qname.clone(),
                qtype: mnemonic::qtype(slowest.qtype).into_owned(),
                wasted: slowest.wasted,
                extra_ms: millis(slowest.extra),
            },
            summary: found.summary.clone(),
            node: node.to_owned(),
        }
    }
}
