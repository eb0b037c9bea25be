//! The scenarios: which server runs where and forwards what to whom, and how the node differs.
use std::{
    fmt,
    net::{IpAddr, Ipv4Addr},
    str::FromStr,
};

use super::{
    network::NodeSettings,
    servers::{Forward, ServerConfig, Software, Transport, ROOT},
    topology::{
        Pod, Server, CLUSTER_DNS, CLUSTER_DOMAIN, CLUSTER_RECORDS, DEAD_DNS, EXTERNAL_A,
        EXTERNAL_AAAA, EXTERNAL_NAME, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, STUB_DOMAIN, UPSTREAM_DNS,
        UPSTREAM_DNS_V6,
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
}

impl Scenario {
    pub const ALL: [Scenario; 6] = [
        Scenario::Healthy,
        Scenario::NodelocalLoop,
        Scenario::SelfLoop,
        Scenario::UnexpectedSource,
        Scenario::DeadUpstream,
        Scenario::TcpLoop,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::NodelocalLoop => "nodelocal-loop",
            Scenario::SelfLoop => "self-loop",
            Scenario::UnexpectedSource => "unexpected-source",
            Scenario::DeadUpstream => "dead-upstream",
            Scenario::TcpLoop => "tcp-loop",
        }
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
        }
    }

    pub(crate) fn node_settings(&self) -> NodeSettings {
        NodeSettings {
            bridge_nf_call_iptables: *self != Scenario::UnexpectedSource,
            dead_server: (*self == Scenario::DeadUpstream).then_some(DEAD_DNS),
        }
    }

    pub(crate) fn server_config(&self, server: Server) -> ServerConfig {
        match server {
            Server::NodeCache => self.node_cache(),
            Server::CoreDnsA => self.coredns(server, Pod::CoreDnsA),
            Server::CoreDnsB => self.coredns(server, Pod::CoreDnsB),
            Server::Upstream => upstream(),
        }
    }

    /// node-local-dns: cluster names to the cluster DNS, the rest to the node's upstream.
    fn node_cache(&self) -> ServerConfig {
        let cluster_dns = IpAddr::V4(CLUSTER_DNS);
        let upstream = IpAddr::V4(UPSTREAM_DNS);
        let (software, transport, forwards) = match self {
            Scenario::Healthy | Scenario::SelfLoop | Scenario::UnexpectedSource => (
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
            Scenario::NodelocalLoop => (
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
        };
        ServerConfig {
            server: Server::NodeCache,
            software,
            listen: vec![NODE_LOCAL_DNS.into(), NODE_LOCAL_DNS_V6.into()],
            local_zones: vec![],
            records: vec![],
            forwards,
            transport,
        }
    }

    /// The CoreDNS replica `server` in `pod`: answers cluster names itself, forwards the rest to what its
    /// `/etc/resolv.conf` (`forward . /etc/resolv.conf`) would name.
    fn coredns(&self, server: Server, pod: Pod) -> ServerConfig {
        let mut listen = vec![IpAddr::V4(pod.ip()), IpAddr::V6(pod.ip6())];
        let (software, forwards) = match self {
            Scenario::Healthy | Scenario::UnexpectedSource => {
                (Software::Dnsmasq, vec![forward(ROOT, UPSTREAM_DNS.into())])
            }
            Scenario::DeadUpstream => (
                Software::Dnsmasq,
                vec![
                    forward(STUB_DOMAIN, DEAD_DNS.into()),
                    forward(ROOT, UPSTREAM_DNS.into()),
                ],
            ),
            // The host's resolv.conf names the node-local cache.
            Scenario::NodelocalLoop | Scenario::TcpLoop => (
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
            software,
            listen,
            local_zones: vec![CLUSTER_DOMAIN],
            records: CLUSTER_RECORDS
                .iter()
                .map(|&(name, address)| (name, address.into()))
                .collect(),
            forwards,
            transport: Transport::Udp,
        }
    }
}

/// The external resolver: answers every name itself and forwards nothing.
fn upstream() -> ServerConfig {
    ServerConfig {
        server: Server::Upstream,
        software: Software::Dnsmasq,
        listen: vec![UPSTREAM_DNS.into(), UPSTREAM_DNS_V6.into()],
        local_zones: vec![ROOT],
        records: vec![
            (EXTERNAL_NAME, EXTERNAL_A.into()),
            (EXTERNAL_NAME, EXTERNAL_AAAA.into()),
        ],
        forwards: vec![],
        transport: Transport::Udp,
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
#[error("unknown scenario `{0}`: expected one of healthy, nodelocal-loop, self-loop, unexpected-source, dead-upstream, tcp-loop")]
pub struct UnknownScenario(String);

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
            scenario.server_config(server).render(dir).expect("renders")
        };
        let cache = render(Scenario::NodelocalLoop, Server::NodeCache);
        assert!(cache.contains("server=10.96.0.10\n"), "{cache}");
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
    fn every_server_config_renders() {
        let dir = std::path::Path::new("/run/dnsloop-lab/example");
        for scenario in Scenario::ALL {
            for server in Server::ALL {
                let config = scenario.server_config(server);
                assert_eq!(config.server, server);
                config.render(dir).expect("renders");
            }
        }
    }
}
