//! The labs the saturation rows are measured on, and where on each the load sends its queries.
use anyhow::Result;
use dnsloop_tests::lab::{Lab, Pod, Scenario, CLUSTER_DNS, NODE_LOCAL_DNS};

use super::measure::Dnsperf;

/// The labs the saturation rows are measured on, each with rows of its own: what watching
/// costs a query depends on how many of a node's interfaces it crosses, and on how many nodes.
#[derive(Clone, Copy)]
pub enum Topology {
    /// The `healthy` lab: its pods on the `cni0` bridge, so that a packet is seen at its pod's
    /// veth and again at the bridge.
    BridgedNode,
    /// `cluster-healthy-routed` on one node: its pods routed Calico-style, each behind a veth
    /// of its own and no bridge.
    RoutedNode,
    /// `cluster-healthy` on two nodes, their pods on bridges, joined by the VXLAN overlay.
    TwoNodes,
}

impl Topology {
    pub const ALL: [Topology; 3] = [
        Topology::BridgedNode,
        Topology::RoutedNode,
        Topology::TwoNodes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Topology::BridgedNode => "bridged node",
            Topology::RoutedNode => "routed node",
            Topology::TwoNodes => "two nodes",
        }
    }

    /// The table's name for the measurement `what` on this topology.
    pub fn section(self, what: &str) -> String {
        format!("{what}, {}", self.name())
    }

    pub fn lab(self) -> Result<Lab> {
        match self {
            Topology::BridgedNode => Lab::builder(Scenario::Healthy).start(),
            Topology::RoutedNode => Lab::builder(Scenario::ClusterHealthyRouted)
                .nodes(1)
                .start(),
            Topology::TwoNodes => Lab::builder(Scenario::ClusterHealthy).nodes(2).start(),
        }
    }

    /// Where `load` sends the queries, for the notes.
    pub fn path(self) -> &'static str {
        match self {
            Topology::BridgedNode => {
                "client pod -> node-local cache -> ClusterIP -> CoreDNS pod, all on the bridge"
            }
            Topology::RoutedNode => "client pod -> ClusterIP -> CoreDNS pod, routed",
            Topology::TwoNodes => {
                "client pod on node 1 -> CoreDNS pod on node 0, over the VXLAN overlay; every \
                 watcher on both nodes"
            }
        }
    }

    /// dnsperf's load on `lab`, a lab of this topology, asking the names in the file `queries`.
    ///
    /// The cluster labs' node caches are dnsdist with a storm budget (20,000 forwards, then 50
    /// a second) that a load at saturation spends within a second, so there the client skips
    /// the cache. On one node it asks the ClusterIP, whose DNAT has the node's CoreDNS pod as
    /// its only endpoint. Across two nodes the DNAT would pick a replica at random for each of
    /// dnsperf's sockets, so that a share of the queries, different in every run, would stay
    /// on the client's node: the client on node 1 asks node 0's CoreDNS pod at its address
    /// instead, as a query does once the DNAT has picked the remote replica, and every query
    /// and answer crosses the overlay.
    pub fn load<'a>(self, lab: &'a Lab, queries: &'a str) -> Dnsperf<'a> {
        let (node, server) = match self {
            Topology::BridgedNode => (0, NODE_LOCAL_DNS),
            Topology::RoutedNode => (0, CLUSTER_DNS),
            Topology::TwoNodes => (1, Pod::CoreDnsA.ip_on(0)),
        };
        Dnsperf {
            lab,
            queries,
            node,
            server: server.to_string(),
            port: 53,
        }
    }
}
