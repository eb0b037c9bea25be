//! What each server does in each scenario: the node cache's, CoreDNS's and the upstreams'
//! configs, which `servers` renders for dnsmasq, unbound, dnsdist or Knot Resolver.
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use super::Scenario;
use crate::lab::{
    servers::{Forward, ServerConfig, Software, Transport, ZoneAnswer, ROOT},
    topology::{
        dead_stub_domains, upstream_failure_domains, Pod, Server, CLUSTER_DNS,
        CLUSTER_DNS_UPSTREAM, CLUSTER_DOMAIN, CLUSTER_RECORDS, DEAD_DNS, EXTERNAL_A, EXTERNAL_AAAA,
        EXTERNAL_NAME, GONE_DNS, LARGE_ANSWER_RECORDS, LARGE_ANSWER_ZONE, NODE_LOCAL_DNS,
        NODE_LOCAL_DNS_V6, ODD_DNS, ODD_DNS_DELAY, STUB_DOMAIN, UPSTREAM_DNS, UPSTREAM_DNS_V6,
    },
};

impl Scenario {
    /// Every DNS name its servers are configured with, records and zones (the root left out),
    /// on every node: what a test of redaction looks for in dnsloop's output.
    pub fn dns_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = (0..self.default_nodes())
            .flat_map(|node| {
                self.servers_on(node)
                    .into_iter()
                    .map(move |server| self.server_config(server, node))
            })
            .flat_map(|config| {
                let zone_answers = config.zone_answers.iter().map(|answer| match answer {
                    ZoneAnswer::Rcode { zone, .. }
                    | ZoneAnswer::Late { zone, .. }
                    | ZoneAnswer::TruncatedOverUdp { zone, .. }
                    | ZoneAnswer::Large { zone, .. } => *zone,
                });
                config
                    .records
                    .iter()
                    .map(|(name, _)| *name)
                    .chain(config.local_zones.iter().copied())
                    .chain(config.forwards.iter().map(|forward| forward.zone))
                    .chain(zone_answers)
                    .collect::<Vec<_>>()
            })
            .filter(|name| *name != ROOT)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// What `server` does on node `node` (the upstream is the same for every node).
    pub(crate) fn server_config(&self, server: Server, node: usize) -> ServerConfig {
        let mut config = match server {
            Server::NodeCache => self.node_cache(),
            Server::CoreDnsA => self.coredns(server, Pod::CoreDnsA, node),
            Server::CoreDnsB => self.coredns(server, Pod::CoreDnsB, node),
            Server::Upstream => self.upstream(),
            Server::UpstreamDelay => {
                upstream_delay(self.upstream_answer_delay().unwrap_or(SLOW_UPSTREAM_DELAY))
            }
            Server::OddUpstream => odd_upstream(),
        };
        config.node = if server.is_upstream_side() { 0 } else { node };
        if self.is_cluster() {
            config.software = match server {
                // dnsdist forwards like CoreDNS's `forward`: a new ID for every query it sends,
                // and a query that comes back around a loop is just one more query.
                Server::NodeCache
                | Server::CoreDnsA
                | Server::CoreDnsB
                | Server::UpstreamDelay
                | Server::OddUpstream => Software::Dnsdist,
                // A resolver of another make than the cluster's own servers, as a datacenter's
                // is; it answers from its own local data.
                Server::Upstream => Software::KnotResolver,
            };
        }
        config
    }

    /// node-local-dns: cluster names to the cluster DNS, the rest to the node's upstream.
    fn node_cache(&self) -> ServerConfig {
        let cluster_dns = IpAddr::V4(CLUSTER_DNS);
        let upstream = IpAddr::V4(UPSTREAM_DNS);
        let (software, transport, forwards) = match self.servers_like() {
            Scenario::Healthy
            | Scenario::SelfLoop
            | Scenario::UnexpectedSource
            | Scenario::ClusterHealthy => (
                Software::Dnsmasq,
                Transport::Udp,
                vec![
                    forward(CLUSTER_DOMAIN, cluster_dns),
                    forward(ROOT, upstream),
                ],
            ),
            // node-local-dns also sends CoreDNS's stub domains to CoreDNS.
            Scenario::DeadUpstream => (
                Software::Dnsmasq,
                Transport::Udp,
                vec![
                    forward(CLUSTER_DOMAIN, cluster_dns),
                    forward(STUB_DOMAIN, cluster_dns),
                    forward(ROOT, upstream),
                ],
            ),
            // Everything to the cluster DNS, as in a node-local-dns Corefile with
            // `forward . <cluster DNS>`.
            Scenario::NodelocalLoop | Scenario::ClusterLoop | Scenario::SlowUpstream => (
                Software::Dnsmasq,
                Transport::Udp,
                vec![forward(ROOT, cluster_dns)],
            ),
            // dnsmasq cannot forward over TCP only; unbound's tcp-upstream is force_tcp.
            Scenario::TcpLoop => (
                Software::Unbound,
                Transport::Tcp,
                vec![forward(ROOT, cluster_dns)],
            ),
            // dnsdist's `tcpOnly`, node-local-dns's force_tcp.
            Scenario::ClusterTcpLoop => (
                Software::Dnsdist,
                Transport::Tcp,
                vec![forward(ROOT, cluster_dns)],
            ),
            // In iptables mode the cache is the kube-dns ClusterIP; CoreDNS is behind
            // kube-dns-upstream.
            Scenario::ClusterLoopIptables => (
                Software::Dnsdist,
                Transport::Udp,
                vec![forward(ROOT, CLUSTER_DNS_UPSTREAM.into())],
            ),
            // Another scenario's servers, wired differently or with a slower upstream:
            // servers_like() never returns these.
            Scenario::ClusterHealthyRouted
            | Scenario::ClusterLoopRouted
            | Scenario::ClusterSlowUpstream => (
                Software::Dnsdist,
                Transport::Udp,
                vec![forward(ROOT, cluster_dns)],
            ),
        };
        let mut listen = vec![IpAddr::V4(NODE_LOCAL_DNS), IpAddr::V6(NODE_LOCAL_DNS_V6)];
        if self.node_cache_takes_cluster_dns() {
            listen.push(cluster_dns);
        }
        ServerConfig {
            server: Server::NodeCache,
            node: 0,
            software,
            listen,
            local_zones: vec![],
            records: vec![],
            forwards,
            transport,
            answer_delay: None,
            zone_answers: Vec::new(),
        }
    }

    /// The CoreDNS replica `server` in `pod`: answers cluster names itself, forwards the rest to what its
    /// `/etc/resolv.conf` (`forward . /etc/resolv.conf`) would name.
    fn coredns(&self, server: Server, pod: Pod, node: usize) -> ServerConfig {
        let mut listen = vec![IpAddr::V4(pod.ip_on(node)), IpAddr::V6(pod.ip6_on(node))];
        let (software, forwards) = match self.servers_like() {
            Scenario::Healthy
            | Scenario::UnexpectedSource
            | Scenario::ClusterHealthy
            | Scenario::ClusterHealthyRouted
            | Scenario::ClusterSlowUpstream
            | Scenario::SlowUpstream => {
                (Software::Dnsmasq, vec![forward(ROOT, UPSTREAM_DNS.into())])
            }
            Scenario::DeadUpstream => (
                Software::Dnsmasq,
                dead_stub_domains()
                    .into_iter()
                    .map(|(zone, server, _)| forward(zone, server))
                    .chain(odd_upstream_forwards())
                    .chain([
                        forward(STUB_DOMAIN, DEAD_DNS.into()),
                        forward(ROOT, UPSTREAM_DNS.into()),
                    ])
                    .collect(),
            ),
            // The host's resolv.conf names the node-local cache.
            Scenario::NodelocalLoop
            | Scenario::TcpLoop
            | Scenario::ClusterLoop
            | Scenario::ClusterTcpLoop
            | Scenario::ClusterLoopIptables
            | Scenario::ClusterLoopRouted => (
                Software::Dnsmasq,
                vec![forward(ROOT, NODE_LOCAL_DNS.into())],
            ),
            // The host's resolv.conf names a local stub resolver (127.0.0.53 and the like).
            // dnsmasq refuses to forward to one of its own addresses; unbound does not.
            Scenario::SelfLoop => {
                listen.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
                (
                    Software::Unbound,
                    vec![forward(ROOT, Ipv4Addr::LOCALHOST.into())],
                )
            }
        };
        ServerConfig {
            server,
            node,
            software,
            listen,
            local_zones: vec![CLUSTER_DOMAIN],
            records: CLUSTER_RECORDS
                .iter()
                .map(|&(name, address)| (name, address.into()))
                .collect(),
            forwards,
            transport: Transport::Udp,
            answer_delay: None,
            zone_answers: Vec::new(),
        }
    }
    /// The external resolver: answers every name itself and forwards nothing. Behind the
    /// delaying dnsdist, if the scenario has one, it listens on loopback only.
    fn upstream(&self) -> ServerConfig {
        let listen = if self.upstream_answer_delay().is_some() {
            UPSTREAM_BEHIND_DELAY.to_vec()
        } else {
            vec![UPSTREAM_DNS.into(), UPSTREAM_DNS_V6.into()]
        };
        upstream_resolver(listen)
    }
}

/// How long the slow-upstream scenarios' upstream takes to answer: slower than the 100 ms the issue
/// asks for, far below CoreDNS's and dig's timeouts.
pub const SLOW_UPSTREAM_DELAY: Duration = Duration::from_millis(150);

/// The loopback addresses the resolver listens on when a delaying dnsdist holds the upstream's
/// addresses in front of it.
pub(super) const UPSTREAM_BEHIND_DELAY: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// The dnsdist in front of the upstream resolver: takes the upstream's addresses, forwards every
/// name to the resolver behind it and holds each answer back `delay`.
fn upstream_delay(delay: Duration) -> ServerConfig {
    ServerConfig {
        server: Server::UpstreamDelay,
        node: 0,
        software: Software::Dnsdist,
        listen: vec![UPSTREAM_DNS.into(), UPSTREAM_DNS_V6.into()],
        local_zones: vec![],
        records: vec![],
        forwards: vec![forward(ROOT, UPSTREAM_BEHIND_DELAY[0])],
        transport: Transport::Udp,
        answer_delay: Some(delay),
        zone_answers: Vec::new(),
    }
}

/// The stub domains of [`upstream_failure_domains`], in order: the first four to [`ODD_DNS`],
/// the last to a gone server, then the upstream resolver.
fn odd_upstream_forwards() -> Vec<Forward> {
    let [refused, servfail, slow, big, retry] = upstream_failure_domains().map(|(zone, _)| zone);
    vec![
        forward(refused, ODD_DNS.into()),
        forward(servfail, ODD_DNS.into()),
        forward(slow, ODD_DNS.into()),
        forward(big, ODD_DNS.into()),
        forward(retry, GONE_DNS.into()),
        forward(retry, UPSTREAM_DNS.into()),
    ]
}

/// The dnsdist answering [`upstream_failure_domains`] badly, at [`ODD_DNS`].
fn odd_upstream() -> ServerConfig {
    let [refused, servfail, slow, big, _] = upstream_failure_domains().map(|(zone, _)| zone);
    ServerConfig {
        server: Server::OddUpstream,
        node: 0,
        software: Software::Dnsdist,
        listen: vec![ODD_DNS.into()],
        local_zones: vec![],
        records: vec![],
        forwards: vec![],
        transport: Transport::Udp,
        answer_delay: None,
        zone_answers: vec![
            ZoneAnswer::Rcode {
                zone: refused,
                rcode: "REFUSED",
            },
            ZoneAnswer::Rcode {
                zone: servfail,
                rcode: "SERVFAIL",
            },
            ZoneAnswer::Late {
                zone: slow,
                address: EXTERNAL_A.into(),
                delay: ODD_DNS_DELAY,
            },
            ZoneAnswer::TruncatedOverUdp {
                zone: big,
                address: EXTERNAL_A.into(),
            },
            ZoneAnswer::Large {
                zone: LARGE_ANSWER_ZONE,
                records: LARGE_ANSWER_RECORDS,
            },
        ],
    }
}

fn upstream_resolver(listen: Vec<IpAddr>) -> ServerConfig {
    ServerConfig {
        server: Server::Upstream,
        node: 0,
        software: Software::Dnsmasq,
        listen,
        local_zones: vec![ROOT],
        records: vec![
            (EXTERNAL_NAME, EXTERNAL_A.into()),
            (EXTERNAL_NAME, EXTERNAL_AAAA.into()),
        ],
        forwards: vec![],
        transport: Transport::Udp,
        answer_delay: None,
        zone_answers: Vec::new(),
    }
}

fn forward(zone: &'static str, to: IpAddr) -> Forward {
    Forward { zone, to }
}
