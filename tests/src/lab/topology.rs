//! The simulated node's fixed layout: namespaces, pods, DNS servers, addresses and DNS records.
//!
//! Every lab instance uses the same interface names and addresses. Instances stay isolated
//! because each one has its own namespaces, named after its prefix.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The port every DNS server of the lab listens on.
pub const DNS_PORT: u16 = 53;

/// The DNS server at `address`, on the lab's DNS port.
pub fn dns_server(address: impl Into<IpAddr>) -> SocketAddr {
    SocketAddr::new(address.into(), DNS_PORT)
}

/// ClusterIP of the cluster DNS Service (kube-dns); nftables DNATs it to the CoreDNS pods.
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
pub const CLUSTER_DNS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0xa);
/// Address of the node-local DNS cache (node-local-dns's default link-local address).
pub const NODE_LOCAL_DNS: Ipv4Addr = Ipv4Addr::new(169, 254, 25, 10);
pub const NODE_LOCAL_DNS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0xa9fe, 0x190a);
/// The node's address on the `cni0` bridge: the pods' default gateway.
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
pub const POD_GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x244, 0, 0, 0, 0, 1);
pub const POD_PREFIX_LEN: u8 = 24;
pub const POD_PREFIX_LEN_V6: u8 = 64;
/// The node's address on its uplink toward the external resolver.
pub const NODE_UPLINK: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);
pub const NODE_UPLINK_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x255, 0, 0, 0, 0, 0, 1);
pub const UPLINK_PREFIX_LEN: u8 = 24;
pub const UPLINK_PREFIX_LEN_V6: u8 = 64;
/// The cluster's external resolver: what the node's `/etc/resolv.conf` should name.
pub const UPSTREAM_DNS: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 53);
pub const UPSTREAM_DNS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x255, 0, 0, 0, 0, 0, 0x53);
/// A DNS server that died long ago (`dead-upstream`): the address exists in the upstream
/// namespace, so the node can reach it, but nftables there drops every packet sent to it.
pub const DEAD_DNS: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 99);

/// Link-local networks the upstream routes back through the node, so that the node-local cache
/// can query the upstream from its own address without masquerading.
pub const NODE_LOCAL_NET: &str = "169.254.0.0/16";
pub const NODE_LOCAL_NET_V6: &str = "fd00::a9fe:0/112";

pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Names the CoreDNS pods answer themselves.
pub const CLUSTER_RECORDS: &[(&str, Ipv4Addr)] = &[
    (
        "kubernetes.default.svc.cluster.local",
        Ipv4Addr::new(10, 96, 0, 1),
    ),
    ("kube-dns.kube-system.svc.cluster.local", CLUSTER_DNS),
    (
        "api.default.svc.cluster.local",
        Ipv4Addr::new(10, 96, 0, 50),
    ),
];
/// An external name that only the upstream resolver knows.
pub const EXTERNAL_NAME: &str = "www.example.test";
pub const EXTERNAL_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
pub const EXTERNAL_AAAA: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x80);
/// Stub domain the CoreDNS pods forward to [`DEAD_DNS`] in `dead-upstream`.
pub const STUB_DOMAIN: &str = "corp.example";

/// The pods on the node's `cni0` bridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pod {
    Client,
    CoreDnsA,
    CoreDnsB,
}

impl Pod {
    pub const ALL: [Pod; 3] = [Pod::Client, Pod::CoreDnsA, Pod::CoreDnsB];
    /// The endpoints of the cluster DNS Service.
    pub const COREDNS: [Pod; 2] = [Pod::CoreDnsA, Pod::CoreDnsB];

    pub fn name(&self) -> &'static str {
        match self {
            Pod::Client => "client",
            Pod::CoreDnsA => "coredns-a",
            Pod::CoreDnsB => "coredns-b",
        }
    }

    pub fn ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, 0, self.host_number())
    }

    pub fn ip6(&self) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x10, 0x244, 0, 0, 0, 0, self.host_number().into())
    }

    /// The Kubernetes namespace the pod would be in.
    pub fn kubernetes_namespace(&self) -> &'static str {
        match self {
            Pod::Client => "default",
            Pod::CoreDnsA | Pod::CoreDnsB => "kube-system",
        }
    }

    /// The pod's name as the API server would give it (a Deployment's pods are named
    /// `<deployment>-<replica set hash>-<suffix>`).
    pub fn kubernetes_name(&self) -> &'static str {
        match self {
            Pod::Client => "client",
            Pod::CoreDnsA => "coredns-5d78c9869d-abcde",
            Pod::CoreDnsB => "coredns-5d78c9869d-fghij",
        }
    }

    /// `namespace/name`, as dnsloop shows a pod it knows.
    pub fn kubernetes_id(&self) -> String {
        format!("{}/{}", self.kubernetes_namespace(), self.kubernetes_name())
    }

    /// The pod's QoS class, which places its cgroup: CoreDNS asks for resources, the client
    /// does not.
    pub(crate) fn qos_class(&self) -> &'static str {
        match self {
            Pod::Client => "besteffort",
            Pod::CoreDnsA | Pod::CoreDnsB => "burstable",
        }
    }

    /// The node side of the pod's veth pair, enslaved to `cni0` (at most 15 characters).
    pub fn host_veth(&self) -> String {
        format!("veth-{}", self.name())
    }

    fn host_number(&self) -> u8 {
        match self {
            Pod::Client => 2,
            Pod::CoreDnsA => 3,
            Pod::CoreDnsB => 4,
        }
    }
}

/// The DNS servers a lab runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Server {
    /// The node-local DNS cache in the node namespace (plays node-local-dns).
    NodeCache,
    /// The CoreDNS replicas, one per CoreDNS pod.
    CoreDnsA,
    CoreDnsB,
    /// The external resolver in the upstream namespace.
    Upstream,
}

impl Server {
    /// In the order a pod's query meets them.
    pub const ALL: [Server; 4] = [
        Server::NodeCache,
        Server::CoreDnsA,
        Server::CoreDnsB,
        Server::Upstream,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Server::NodeCache => "node-cache",
            Server::CoreDnsA => "coredns-a",
            Server::CoreDnsB => "coredns-b",
            Server::Upstream => "upstream",
        }
    }

    /// The pod the server runs in, if it is one of the node's pods on `cni0`.
    pub fn pod(&self) -> Option<Pod> {
        match self {
            Server::CoreDnsA => Some(Pod::CoreDnsA),
            Server::CoreDnsB => Some(Pod::CoreDnsB),
            Server::NodeCache | Server::Upstream => None,
        }
    }
}

/// What a well-known lab address is, for descriptions ("10.96.0.10 (cluster DNS ClusterIP)").
pub(crate) fn role_of_address(address: IpAddr) -> Option<&'static str> {
    let role = match address {
        IpAddr::V4(a) if a == CLUSTER_DNS => "cluster DNS ClusterIP",
        IpAddr::V6(a) if a == CLUSTER_DNS_V6 => "cluster DNS ClusterIP",
        IpAddr::V4(a) if a == NODE_LOCAL_DNS => "node-local DNS cache",
        IpAddr::V6(a) if a == NODE_LOCAL_DNS_V6 => "node-local DNS cache",
        IpAddr::V4(a) if a == UPSTREAM_DNS => "upstream resolver",
        IpAddr::V6(a) if a == UPSTREAM_DNS_V6 => "upstream resolver",
        IpAddr::V4(a) if a == DEAD_DNS => "dead server: nothing answers",
        a if a.is_loopback() => "loopback: this server itself",
        _ => return None,
    };
    Some(role)
}

/// The namespaces of one lab instance: `<prefix>-node`, `<prefix>-client`, ...
#[derive(Clone, Debug)]
pub(crate) struct Namespaces {
    node: String,
    client: String,
    coredns_a: String,
    coredns_b: String,
    upstream: String,
}

impl Namespaces {
    pub fn new(prefix: &str) -> Namespaces {
        Namespaces {
            node: format!("{prefix}-node"),
            client: format!("{prefix}-{}", Pod::Client.name()),
            coredns_a: format!("{prefix}-{}", Pod::CoreDnsA.name()),
            coredns_b: format!("{prefix}-{}", Pod::CoreDnsB.name()),
            upstream: format!("{prefix}-upstream"),
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn pod(&self, pod: Pod) -> &str {
        match pod {
            Pod::Client => &self.client,
            Pod::CoreDnsA => &self.coredns_a,
            Pod::CoreDnsB => &self.coredns_b,
        }
    }

    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The namespace `server` runs in.
    pub fn of_server(&self, server: Server) -> &str {
        match server {
            Server::NodeCache => self.node(),
            Server::CoreDnsA => self.pod(Pod::CoreDnsA),
            Server::CoreDnsB => self.pod(Pod::CoreDnsB),
            Server::Upstream => self.upstream(),
        }
    }

    /// All of them, node first.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.node,
            &self.client,
            &self.coredns_a,
            &self.coredns_b,
            &self.upstream,
        ]
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.all().contains(&namespace)
    }
}
