//! The scenarios: which server runs where and forwards what to whom, and how the node differs.
use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
    time::Duration,
};

use super::{
    network::NodeSettings,
    servers::{Forward, ServerConfig, Software, Transport, ZoneAnswer, ROOT},
    topology::{
        dead_stub_domains, upstream_failure_domains, Pod, PodNetwork, Server, CLUSTER_DNS,
        CLUSTER_DNS_UPSTREAM, CLUSTER_DOMAIN, CLUSTER_RECORDS, DEAD_DNS, EXTERNAL_A, EXTERNAL_AAAA,
        EXTERNAL_NAME, GONE_DNS, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, ODD_DNS, ODD_DNS_DELAY,
        STUB_DOMAIN, UPSTREAM_DNS, UPSTREAM_DNS_V6,
    },
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    Healthy,
    NodelocalLoop,
    SelfLoop,
    UnexpectedSource,
    DeadUpstream,
    TcpLoop,
    ClusterHealthy,
    ClusterLoop,
    ClusterTcpLoop,
    ClusterHealthyRouted,
    ClusterLoopRouted,
    ClusterLoopIptables,
    ClusterSlowUpstream,
    SlowUpstream,
}

impl Scenario {
    pub const ALL: [Scenario; 14] = [
        Scenario::Healthy,
        Scenario::NodelocalLoop,
        Scenario::SelfLoop,
        Scenario::UnexpectedSource,
        Scenario::DeadUpstream,
        Scenario::TcpLoop,
        Scenario::ClusterHealthy,
        Scenario::ClusterLoop,
        Scenario::ClusterTcpLoop,
        Scenario::ClusterHealthyRouted,
        Scenario::ClusterLoopRouted,
        Scenario::ClusterLoopIptables,
        Scenario::ClusterSlowUpstream,
        Scenario::SlowUpstream,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::NodelocalLoop => "nodelocal-loop",
            Scenario::SelfLoop => "self-loop",
            Scenario::UnexpectedSource => "unexpected-source",
            Scenario::DeadUpstream => "dead-upstream",
            Scenario::TcpLoop => "tcp-loop",
            Scenario::ClusterHealthy => "cluster-healthy",
            Scenario::ClusterLoop => "cluster-loop",
            Scenario::ClusterTcpLoop => "cluster-tcp-loop",
            Scenario::ClusterHealthyRouted => "cluster-healthy-routed",
            Scenario::ClusterLoopRouted => "cluster-loop-routed",
            Scenario::ClusterLoopIptables => "cluster-loop-iptables",
            Scenario::ClusterSlowUpstream => "cluster-slow-upstream",
            Scenario::SlowUpstream => "slow-upstream",
        }
    }

    /// How many nodes `Lab::builder` builds for this scenario: the cluster scenarios are about
    /// traffic between nodes.
    pub fn default_nodes(&self) -> usize {
        if self.is_cluster() {
            2
        } else {
            1
        }
    }

    /// Whether this is one of the cluster scenarios, whose servers are dnsdist and whose every
    /// node runs a CoreDNS pod.
    pub fn is_cluster(&self) -> bool {
        matches!(
            self,
            Scenario::ClusterHealthy
                | Scenario::ClusterLoop
                | Scenario::ClusterTcpLoop
                | Scenario::ClusterHealthyRouted
                | Scenario::ClusterLoopRouted
                | Scenario::ClusterLoopIptables
                | Scenario::ClusterSlowUpstream
        )
    }

    /// How the nodes connect their pods: routed, Calico-style, in the `-routed` scenarios; on
    /// the `cni0` bridge everywhere else.
    pub fn pod_network(&self) -> PodNetwork {
        match self {
            Scenario::ClusterHealthyRouted | Scenario::ClusterLoopRouted => PodNetwork::Routed,
            _ => PodNetwork::Bridge,
        }
    }

    /// Whether node-local-dns runs in iptables mode: the node cache also takes the kube-dns
    /// ClusterIP ([`CLUSTER_DNS`]) for itself, with NOTRACK rules so kube-proxy's DNAT never
    /// sees its queries, and reaches CoreDNS through kube-dns-upstream
    /// ([`CLUSTER_DNS_UPSTREAM`]).
    pub fn node_cache_takes_cluster_dns(&self) -> bool {
        *self == Scenario::ClusterLoopIptables
    }

    /// The scenario whose DNS servers this one runs, for those that differ only in how the
    /// nodes are wired.
    fn servers_like(&self) -> Scenario {
        match self {
            Scenario::ClusterHealthyRouted => Scenario::ClusterHealthy,
            Scenario::ClusterLoopRouted => Scenario::ClusterLoop,
            // Its upstream is slower; the nodes' servers are cluster-healthy's.
            Scenario::ClusterSlowUpstream => Scenario::ClusterHealthy,
            other => *other,
        }
    }

    /// The pods node `node` runs. The node scenarios keep both CoreDNS pods on node 0 (other
    /// nodes, if asked for, only have a client and reach CoreDNS over the overlay); the cluster
    /// scenarios run one CoreDNS replica on every node.
    pub fn pods_on(&self, node: usize) -> Vec<Pod> {
        match (self.is_cluster(), node) {
            (true, _) => vec![Pod::Client, Pod::CoreDnsA],
            (false, 0) => Pod::ALL.to_vec(),
            (false, _) => vec![Pod::Client],
        }
    }

    /// How long the upstream takes to answer: a dnsdist in front of it ([`Server::UpstreamDelay`])
    /// holds every answer back this long in the slow-upstream scenarios; the others answer at
    /// once.
    pub fn upstream_answer_delay(&self) -> Option<Duration> {
        matches!(self, Scenario::ClusterSlowUpstream | Scenario::SlowUpstream)
            .then_some(SLOW_UPSTREAM_DELAY)
    }

    /// The servers node `node` runs; the upstream side, shared by all nodes, is node 0's.
    pub fn servers_on(&self, node: usize) -> Vec<Server> {
        let pods = self.pods_on(node);
        Server::ALL
            .into_iter()
            .filter(|server| match (server, server.pod()) {
                (Server::Upstream, _) => node == 0,
                (Server::UpstreamDelay, _) => node == 0 && self.upstream_answer_delay().is_some(),
                (Server::OddUpstream, _) => node == 0 && *self == Scenario::DeadUpstream,
                (_, Some(pod)) => pods.contains(&pod),
                (_, None) => true,
            })
            .collect()
    }

    /// What goes wrong, in one sentence.
    pub fn summary(&self) -> &'static str {
        match self {
            Scenario::Healthy => {
                "every name resolves: cluster names via the ClusterIP, external ones via the upstream"
            }
            Scenario::NodelocalLoop => {
                "CoreDNS forwards to the node-local cache, which forwards to CoreDNS: \
                 external names go round cache -> ClusterIP -> CoreDNS -> cache"
            }
            Scenario::SelfLoop => {
                "CoreDNS forwards to 127.0.0.1, i.e. to itself over the pod's lo \
                 (a resolv.conf naming a local stub)"
            }
            Scenario::UnexpectedSource => {
                "bridge-nf-call-iptables=0: a pod's query to the ClusterIP is answered from the \
                 CoreDNS pod's own address, which the client drops; conntrack stays UNREPLIED"
            }
            Scenario::DeadUpstream => {
                "CoreDNS forwards the stub domain corp.example to a server that is gone: \
                 those names time out, the others resolve"
            }
            Scenario::TcpLoop => {
                "the node cache forwards over TCP only (force_tcp) to the ClusterIP, and CoreDNS \
                 forwards back to the node cache: the loop runs over TCP"
            }
            Scenario::ClusterHealthy => {
                "nodes joined by a VXLAN overlay, a CoreDNS pod (dnsdist) on each behind the \
                 ClusterIP: every name resolves from every node"
            }
            Scenario::ClusterLoop => {
                "the kubespray loop across nodes: every node cache forwards `.` to the ClusterIP, \
                 every CoreDNS pod to its own node's cache; external names circulate from node to \
                 node over the overlay"
            }
            Scenario::ClusterTcpLoop => {
                "cluster-loop with every node cache forwarding over TCP only (force_tcp): the \
                 loop crosses the overlay over TCP"
            }
            Scenario::ClusterHealthyRouted => {
                "cluster-healthy with routed pods, Calico-style: no cni0 bridge, a /32 per pod \
                 behind a cali* veth with proxy ARP; every name resolves from every node"
            }
            Scenario::ClusterLoopRouted => {
                "cluster-loop with routed pods, Calico-style: no cni0 bridge, a /32 per pod \
                 behind a cali* veth with proxy ARP; external names circulate between nodes"
            }
            Scenario::ClusterLoopIptables => {
                "node-local-dns in iptables mode: every node cache also holds the kube-dns \
                 ClusterIP (NOTRACK, no DNAT) and forwards `.` to kube-dns-upstream, every CoreDNS \
                 pod to its node's cache; external names circulate between nodes"
            }
            Scenario::SlowUpstream => {
                "the node cache forwards every name to the ClusterIP, CoreDNS to an upstream that \
                 a dnsdist in front of it holds back 150 ms (UDP): external names resolve, slowly, \
                 through pod -> cache -> ClusterIP -> CoreDNS pod -> upstream"
            }
            Scenario::ClusterSlowUpstream => {
                "cluster-healthy with a slow upstream: a dnsdist in front of kresd holds every \
                 answer 150 ms (UDP), so CoreDNS's forwards stay unanswered that long; every name \
                 still resolves"
            }
        }
    }

    pub(crate) fn node_settings(&self) -> NodeSettings {
        NodeSettings {
            bridge_nf_call_iptables: *self != Scenario::UnexpectedSource,
            dead_server: (*self == Scenario::DeadUpstream).then_some(DEAD_DNS),
            pod_network: self.pod_network(),
            node_cache_takes_cluster_dns: self.node_cache_takes_cluster_dns(),
        }
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
}

/// How long the slow-upstream scenarios' upstream takes to answer: slower than the 100 ms the issue
/// asks for, far below CoreDNS's and dig's timeouts.
pub const SLOW_UPSTREAM_DELAY: Duration = Duration::from_millis(150);

/// The loopback addresses the resolver listens on when a delaying dnsdist holds the upstream's
/// addresses in front of it.
const UPSTREAM_BEHIND_DELAY: [IpAddr; 2] = [
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
        ],
    }
}

impl Scenario {
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

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown scenario `{0}`: expected one of {names}", names = scenario_names())]
pub struct UnknownScenario(String);

fn scenario_names() -> String {
    Scenario::ALL.map(|scenario| scenario.name()).join(", ")
}

impl FromStr for Scenario {
    type Err = UnknownScenario;

    fn from_str(name: &str) -> Result<Scenario, UnknownScenario> {
        Scenario::ALL
            .into_iter()
            .find(|scenario| scenario.name() == name)
            .ok_or_else(|| UnknownScenario(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for scenario in Scenario::ALL {
            assert_eq!(
                scenario.to_string().parse::<Scenario>().ok(),
                Some(scenario)
            );
        }
        assert!("loop".parse::<Scenario>().is_err());
    }

    #[test]
    fn cluster_scenarios_run_coredns_on_every_node_and_the_upstream_once() {
        assert_eq!(Scenario::ClusterLoop.default_nodes(), 2);
        assert_eq!(Scenario::Healthy.default_nodes(), 1);
        assert_eq!(
            Scenario::ClusterHealthy.servers_on(1),
            [Server::NodeCache, Server::CoreDnsA]
        );
        assert_eq!(
            Scenario::Healthy.servers_on(0),
            [
                Server::NodeCache,
                Server::CoreDnsA,
                Server::CoreDnsB,
                Server::Upstream
            ]
        );
        assert_eq!(
            Scenario::ClusterSlowUpstream.servers_on(0),
            [
                Server::NodeCache,
                Server::CoreDnsA,
                Server::Upstream,
                Server::UpstreamDelay
            ]
        );
        assert_eq!(
            Scenario::ClusterSlowUpstream.servers_on(1),
            [Server::NodeCache, Server::CoreDnsA]
        );
        assert_eq!(Scenario::Healthy.servers_on(2), [Server::NodeCache]);
    }

    #[test]
    fn only_unexpected_source_turns_bridge_netfilter_off() {
        for scenario in Scenario::ALL {
            assert_eq!(
                scenario.node_settings().bridge_nf_call_iptables,
                scenario != Scenario::UnexpectedSource
            );
        }
    }

    #[test]
    fn loop_scenarios_point_the_path_back_at_itself() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        let render = |scenario: Scenario, server| {
            scenario
                .server_config(server, 0)
                .render(dir)
                .expect("renders")
        };
        let cache = render(Scenario::NodelocalLoop, Server::NodeCache);
        assert!(cache.contains("server=10.96.0.10\n"), "{cache}");
        let cache = render(Scenario::ClusterLoop, Server::NodeCache);
        assert!(
            cache.contains("newServer({address=\"10.96.0.10:53\"")
                && cache.contains("AllRule(), PoolAction(\"forward-0\")"),
            "{cache}"
        );
        let coredns = render(Scenario::ClusterLoop, Server::CoreDnsA);
        for line in [
            "newServer({address=\"169.254.25.10:53\"",
            "QNameRule(\"kubernetes.default.svc.cluster.local.\"), SpoofAction({\"10.96.0.1\"})",
        ] {
            assert!(coredns.contains(line), "{coredns}");
        }
        let coredns = render(Scenario::NodelocalLoop, Server::CoreDnsB);
        assert!(coredns.contains("server=169.254.25.10\n"), "{coredns}");
        let coredns = render(Scenario::SelfLoop, Server::CoreDnsA);
        for line in [
            "interface: 127.0.0.1",
            "forward-addr: 127.0.0.1@53",
            "do-not-query-localhost: no",
        ] {
            assert!(coredns.contains(line), "{coredns}");
        }
        let cache = render(Scenario::TcpLoop, Server::NodeCache);
        for line in ["tcp-upstream: yes", "forward-addr: 10.96.0.10@53"] {
            assert!(cache.contains(line), "{cache}");
        }
    }

    #[test]
    fn cluster_variants_forward_over_tcp_take_the_cluster_ip_or_route_their_pods() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        let render = |scenario: Scenario, server| {
            scenario
                .server_config(server, 1)
                .render(dir)
                .expect("renders")
        };
        let cache = render(Scenario::ClusterTcpLoop, Server::NodeCache);
        assert!(
            cache.contains("newServer({address=\"10.96.0.10:53\"")
                && cache.contains("tcpOnly=true")
                && cache.contains("AndRule({TCPRule(true), NotRule(MaxQPSRule(50, 1000))})"),
            "{cache}"
        );
        assert!(!render(Scenario::ClusterLoop, Server::NodeCache).contains("tcpOnly"));
        let cache = render(Scenario::ClusterLoopIptables, Server::NodeCache);
        for line in [
            "setLocal(\"169.254.25.10:53\")",
            "addLocal(\"10.96.0.10:53\")",
            "newServer({address=\"10.96.0.11:53\"",
        ] {
            assert!(cache.contains(line), "{cache}");
        }
        let coredns = render(Scenario::ClusterLoopIptables, Server::CoreDnsA);
        assert!(
            coredns.contains("newServer({address=\"169.254.25.10:53\""),
            "{coredns}"
        );
        assert_eq!(
            render(Scenario::ClusterLoopRouted, Server::NodeCache),
            render(Scenario::ClusterLoop, Server::NodeCache)
        );
        let routed: Vec<Scenario> = Scenario::ALL
            .into_iter()
            .filter(|scenario| scenario.pod_network() == PodNetwork::Routed)
            .collect();
        assert_eq!(
            routed,
            [Scenario::ClusterHealthyRouted, Scenario::ClusterLoopRouted]
        );
        for scenario in Scenario::ALL {
            assert_eq!(
                scenario.node_settings().node_cache_takes_cluster_dns,
                scenario == Scenario::ClusterLoopIptables
            );
        }
    }

    #[test]
    fn the_cluster_upstream_is_knot_resolver_and_the_node_upstream_dnsmasq() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        let upstream = Scenario::ClusterHealthy.server_config(Server::Upstream, 0);
        assert_eq!(upstream.software, Software::KnotResolver);
        let conf = upstream.render(dir).expect("renders");
        for line in [
            "net.listen('10.255.0.53', 53, { kind = 'dns' })",
            "[kres.type.A] = { rdata = { kres.str2ip('192.0.2.80') }, ttl = 0 }",
            "[kres.type.AAAA] = { rdata = { kres.str2ip('2001:db8::80') }, ttl = 0 }",
            "{ todname('www.example.test.') }",
            "policy.add(policy.all(policy.DENY))",
            "trust_anchors.remove('.')",
        ] {
            assert!(conf.contains(line), "{line}:\n{conf}");
        }
        assert_eq!(
            Scenario::Healthy
                .server_config(Server::Upstream, 0)
                .software,
            Software::Dnsmasq
        );
    }

    #[test]
    fn the_slow_upstream_is_a_delaying_dnsdist_in_front_of_knot_resolver() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        let scenario = Scenario::ClusterSlowUpstream;
        let front = scenario.server_config(Server::UpstreamDelay, 0);
        assert_eq!(front.software, Software::Dnsdist);
        let conf = front.render(dir).expect("renders");
        for line in [
            "setLocal(\"10.255.0.53:53\")",
            "newServer({address=\"127.0.0.1:53\"",
            "addResponseAction(AllRule(), DelayResponseAction(150))",
        ] {
            assert!(conf.contains(line), "{line}:\n{conf}");
        }
        let resolver = scenario.server_config(Server::Upstream, 0);
        assert_eq!(resolver.software, Software::KnotResolver);
        let conf = resolver.render(dir).expect("renders");
        assert!(
            conf.contains("net.listen('127.0.0.1', 53") && !conf.contains("10.255.0.53"),
            "{conf}"
        );
        // The nodes' servers are cluster-healthy's.
        for server in [Server::NodeCache, Server::CoreDnsA] {
            assert_eq!(
                scenario
                    .server_config(server, 1)
                    .render(dir)
                    .expect("renders"),
                Scenario::ClusterHealthy
                    .server_config(server, 1)
                    .render(dir)
                    .expect("renders")
            );
        }
        assert_eq!(Scenario::ClusterHealthy.upstream_answer_delay(), None);
        let mut dnsmasq = Scenario::Healthy.server_config(Server::Upstream, 0);
        dnsmasq.answer_delay = Some(SLOW_UPSTREAM_DELAY);
        assert!(dnsmasq.render(dir).is_err(), "only dnsdist delays answers");
    }

    #[test]
    fn slow_upstream_sends_external_names_through_coredns_to_a_delayed_upstream() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        let scenario = Scenario::SlowUpstream;
        assert_eq!(scenario.default_nodes(), 1);
        assert!(scenario.servers_on(0).contains(&Server::UpstreamDelay));
        let forwards = |server| {
            let config = scenario.server_config(server, 0);
            config
                .forwards
                .iter()
                .map(|forward| (forward.zone, forward.to))
                .collect::<Vec<_>>()
        };
        assert_eq!(forwards(Server::NodeCache), [(ROOT, CLUSTER_DNS.into())]);
        assert_eq!(forwards(Server::CoreDnsA), [(ROOT, UPSTREAM_DNS.into())]);
        let front = scenario.server_config(Server::UpstreamDelay, 0);
        assert!(front
            .render(dir)
            .expect("renders")
            .contains("DelayResponseAction(150)"));
        let resolver = scenario.server_config(Server::Upstream, 0);
        assert_eq!(resolver.software, Software::Dnsmasq);
        assert_eq!(resolver.listen, UPSTREAM_BEHIND_DELAY);
    }

    #[test]
    fn unknown_scenarios_are_told_every_name() {
        let error = "cluster"
            .parse::<Scenario>()
            .expect_err("unknown")
            .to_string();
        for scenario in Scenario::ALL {
            assert!(error.contains(scenario.name()), "{error}");
        }
    }

    #[test]
    fn every_server_config_renders() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        for scenario in Scenario::ALL {
            for server in Server::ALL {
                let config = scenario.server_config(server, 1);
                assert_eq!(config.server, server);
                config.render(dir).expect("renders");
            }
        }
    }
}
