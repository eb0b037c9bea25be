//! The scenarios: which server runs where and forwards what to whom, and how the node differs.
use std::{fmt, str::FromStr, time::Duration};

use super::{
    network::NodeSettings,
    topology::{Pod, PodNetwork, Server, DEAD_DNS},
};

mod server_configs;

pub use server_configs::SLOW_UPSTREAM_DELAY;

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
    use super::server_configs::UPSTREAM_BEHIND_DELAY;
    use super::*;
    use crate::lab::{
        servers::{Software, ROOT},
        topology::{CLUSTER_DNS, UPSTREAM_DNS},
    };

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

    #[test]
    fn a_scenarios_dns_names_are_those_its_servers_are_configured_with() {
        let names = Scenario::DeadUpstream.dns_names();
        for name in [
            "www.example.test",
            "kubernetes.default.svc.cluster.local",
            "corp.example",
            "gone.corp.example",
            "servfail.corp.example",
        ] {
            assert!(names.contains(&name), "{name}: {names:?}");
        }
        assert!(!names.contains(&"."), "the root is no name");
        assert!(Scenario::ClusterLoop
            .dns_names()
            .contains(&"www.example.test"));
    }
}
