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
/// ClusterIP of the `kube-dns-upstream` Service, which node-local-dns in iptables mode creates
/// to reach CoreDNS: it takes over [`CLUSTER_DNS`] itself (`cluster-loop-iptables`). Same
/// endpoints as kube-dns.
pub const CLUSTER_DNS_UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 11);
/// Address of the node-local DNS cache (node-local-dns's default link-local address).
pub const NODE_LOCAL_DNS: Ipv4Addr = Ipv4Addr::new(169, 254, 25, 10);
pub const NODE_LOCAL_DNS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0xa9fe, 0x190a);
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
/// A DNS server decommissioned long ago on a subnet every node still routes out of its pod
/// bridge (`dead-upstream`): nothing answers ARP for it, so a node holds each query to it for a
/// neighbour, then drops it (NEIGH_FAILED).
pub const GONE_DNS: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 53);
pub const GONE_SUBNET: &str = "10.99.0.0/24";
/// A host beyond the node that is up but runs no DNS server (`dead-upstream`): it refuses every
/// query with an ICMP port unreachable.
pub const CLOSED_DNS: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 98);

/// A server beyond the node that answers badly (`dead-upstream`): at once with REFUSED or
/// SERVFAIL, or only after longer than dnsloop's timeout ([`upstream_failure_domains`]).
pub const ODD_DNS: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 96);
/// How long [`ODD_DNS`] takes to answer `slow.corp.example`: past dnsloop's 2 s timeout,
/// within dig's 5 s.
pub const ODD_DNS_DELAY: std::time::Duration = std::time::Duration::from_millis(2_500);

/// A name [`ODD_DNS`] answers with [`LARGE_ANSWER_RECORDS`] A records (3,242 bytes asked as
/// `large.corp.example A`), whatever EDNS size the query advertises, as a server with a large
/// buffer does: over UDP, a reply larger than the path's MTU, which goes in IP fragments.
pub const LARGE_ANSWER_ZONE: &str = "large.corp.example";
pub const LARGE_ANSWER_RECORDS: u8 = 200;

/// The stub domains CoreDNS forwards, in `dead-upstream`, to servers that answer badly or
/// only on a second try, each with what happens: at once REFUSED, at once SERVFAIL, after
/// [`ODD_DNS_DELAY`], truncated over UDP so that the client asks again over TCP (all by
/// [`ODD_DNS`]), and from the second of two servers, the first gone ([`GONE_DNS`]), the second
/// the upstream resolver (NXDOMAIN).
pub fn upstream_failure_domains() -> [(&'static str, &'static str); 5] {
    [
        ("refused.corp.example", "answered REFUSED at once"),
        ("servfail.corp.example", "answered SERVFAIL at once"),
        ("slow.corp.example", "answered after 2.5 s"),
        ("big.corp.example", "truncated over UDP, answered over TCP"),
        (
            "retry.corp.example",
            "first server gone, the second answers NXDOMAIN",
        ),
    ]
}

/// The stub domains CoreDNS forwards, in `dead-upstream`, to servers that never answer, each
/// under [`STUB_DOMAIN`] (which node caches send to CoreDNS), with its server and what is wrong
/// with it: besides [`DEAD_DNS`], where packets vanish, a server gone from an attached subnet,
/// and hosts up with no DNS server, beyond the node, on the node (its uplink address) and in a
/// pod (the client's).
pub fn dead_stub_domains() -> [(&'static str, IpAddr, &'static str); 4] {
    [
        (
            "gone.corp.example",
            GONE_DNS.into(),
            "gone: nothing answers ARP",
        ),
        (
            "far.corp.example",
            CLOSED_DNS.into(),
            "up beyond the node, DNS port closed",
        ),
        (
            "node.corp.example",
            NODE_UPLINK.into(),
            "the node, DNS port closed",
        ),
        (
            "pod.corp.example",
            Pod::Client.ip().into(),
            "a pod, DNS port closed",
        ),
    ]
}

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

    /// The pod's address on node 0 (the single node of a one-node lab).
    pub fn ip(&self) -> Ipv4Addr {
        self.ip_on(0)
    }

    pub fn ip6(&self) -> Ipv6Addr {
        self.ip6_on(0)
    }

    /// The pod's address on node `node`, in that node's pod CIDR 10.244.`node`.0/24.
    pub fn ip_on(&self, node: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, node_octet(node), self.host_number())
    }

    pub fn ip6_on(&self, node: usize) -> Ipv6Addr {
        Ipv6Addr::new(
            0xfd00,
            0x10,
            0x244,
            node_octet(node).into(),
            0,
            0,
            0,
            self.host_number().into(),
        )
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

    /// The name of this pod on node `node`: node 0's pods keep [`Pod::kubernetes_name`]; the
    /// other nodes' replicas get a suffix of their own, as pod names are unique in a cluster.
    pub fn kubernetes_name_on(&self, node: usize) -> String {
        match node {
            0 => self.kubernetes_name().to_owned(),
            node => format!("{}-node{node}", self.kubernetes_name()),
        }
    }

    /// `namespace/name` of this pod on node `node`.
    pub fn kubernetes_id_on(&self, node: usize) -> String {
        format!(
            "{}/{}",
            self.kubernetes_namespace(),
            self.kubernetes_name_on(node)
        )
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

    /// The node side of the pod's veth pair on node `node` when pods are routed
    /// ([`PodNetwork::Routed`]): `cali` and 11 hex digits of a hash of the pod's
    /// `namespace/name`, as Calico names it (15 characters, the kernel's limit).
    pub fn cali_veth_on(&self, node: usize) -> String {
        format!("cali{:011x}", fnv1a(&self.kubernetes_id_on(node)) >> 20)
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
    /// A dnsdist in the upstream namespace in front of the resolver, holding back every answer
    /// (cluster-slow-upstream only): the nodes see a slow upstream.
    UpstreamDelay,
    /// A dnsdist in the upstream namespace answering some stub domains badly ([`ODD_DNS`],
    /// dead-upstream only).
    OddUpstream,
}

impl Server {
    /// In the order a pod's query meets them.
    pub const ALL: [Server; 6] = [
        Server::NodeCache,
        Server::CoreDnsA,
        Server::CoreDnsB,
        Server::Upstream,
        Server::UpstreamDelay,
        Server::OddUpstream,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Server::NodeCache => "node-cache",
            Server::CoreDnsA => "coredns-a",
            Server::CoreDnsB => "coredns-b",
            Server::Upstream => "upstream",
            Server::UpstreamDelay => "upstream-delay",
            Server::OddUpstream => "upstream-odd",
        }
    }

    /// Whether it runs in the upstream namespace, once for the whole lab (as node 0's) rather
    /// than on every node.
    pub fn is_upstream_side(&self) -> bool {
        matches!(
            self,
            Server::Upstream | Server::UpstreamDelay | Server::OddUpstream
        )
    }

    /// The pod the server runs in, if it is one of the node's pods on `cni0`.
    pub fn pod(&self) -> Option<Pod> {
        match self {
            Server::CoreDnsA => Some(Pod::CoreDnsA),
            Server::CoreDnsB => Some(Pod::CoreDnsB),
            Server::NodeCache | Server::Upstream | Server::UpstreamDelay | Server::OddUpstream => {
                None
            }
        }
    }
}

/// FNV-1a, 64 bits: a stable hash (unlike std's, which may change between releases), so the
/// veth names are the same in every run.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How a node connects its pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodNetwork {
    /// flannel's and the bridge plugin's way: every pod's host veth is a port of the `cni0`
    /// bridge, which holds the pod CIDR's gateway; pods have a /24.
    Bridge,
    /// Calico's way: no bridge. A pod has a /32 (/128) and a default route via
    /// [`ROUTED_POD_GATEWAY`] on its `eth0`, an address nobody has: its host veth
    /// ([`Pod::cali_veth_on`]) answers every ARP request by proxy. The node routes each pod's
    /// /32 to its veth and blackholes the rest of its pod CIDR.
    Routed,
}

/// The default gateway of a routed pod (Calico's): no device has it; proxy ARP on the pod's
/// host veth answers for it.
pub const ROUTED_POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The MAC address Calico gives every host veth; the link-local address derived from it is the
/// routed pods' IPv6 default gateway ([`ROUTED_POD_GATEWAY_V6`]).
pub const ROUTED_HOST_VETH_MAC: &str = "ee:ee:ee:ee:ee:ee";
pub const ROUTED_POD_GATEWAY_V6: Ipv6Addr =
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0xecee, 0xeeff, 0xfeee, 0xeeee);

/// Most nodes a lab builds.
pub const MAX_NODES: usize = 3;
/// Each node's VXLAN device: the overlay that carries pod traffic between nodes (flannel's
/// `flannel.1`).
pub const OVERLAY_DEVICE: &str = "vxlan0";
/// Each node's link to the underlay, which carries nothing but the overlay's encapsulated
/// packets (two nodes or more).
pub const UNDERLAY_DEVICE: &str = "eth1";
/// Each node's uplink toward the external resolver: a veth into the upstream namespace in a
/// one-node lab, a macvlan on the fabric's external bridge with two nodes or more.
pub const UPLINK_DEVICE: &str = "eth0";
/// VXLAN's IANA port, which the overlay uses.
pub const VXLAN_PORT: u16 = 4789;
pub const VXLAN_ID: u32 = 1;
/// The cluster's pod network; node `i` has 10.244.`i`.0/24 of it.
pub const CLUSTER_POD_NETWORK: &str = "10.244.0.0/16";

/// Node `node`'s third address octet; nodes are at most [`MAX_NODES`], so it always fits.
fn node_octet(node: usize) -> u8 {
    u8::try_from(node).unwrap_or(u8::MAX)
}

/// Node `node`'s address on its `cni0` bridge: its pods' default gateway.
pub fn pod_gateway_on(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, node_octet(node), 1)
}

pub fn pod_gateway6_on(node: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x244, node_octet(node).into(), 0, 0, 0, 1)
}

/// Node `node`'s pod CIDR, `10.244.<node>.0/24`.
pub fn pod_cidr_on(node: usize) -> String {
    format!("10.244.{}.0/{POD_PREFIX_LEN}", node_octet(node))
}

pub fn pod_cidr6_on(node: usize) -> String {
    format!("fd00:10:244:{}::/{POD_PREFIX_LEN_V6}", node_octet(node))
}

/// Node `node`'s address on its uplink (node 0's is [`NODE_UPLINK`]).
pub fn node_uplink_on(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, node_octet(node).saturating_add(1))
}

/// Node `node`'s address on the underlay (its [`UNDERLAY_DEVICE`]), the VXLAN tunnel endpoint.
pub fn node_underlay_on(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 253, 0, node_octet(node).saturating_add(1))
}
pub const UNDERLAY_PREFIX_LEN: u8 = 24;

/// Node `node`'s address on its [`OVERLAY_DEVICE`], `10.244.<node>.0/32`, as flannel gives it:
/// the gateway the other nodes route the node's pod CIDR through.
pub fn overlay_address_on(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, node_octet(node), 0)
}

/// Node `node`'s [`OVERLAY_DEVICE`] MAC address, fixed so that every other node can be given
/// it (static neighbour and forwarding entries, no learning).
pub fn overlay_mac_on(node: usize) -> String {
    format!("0a:58:0a:f4:{:02x}:00", node_octet(node))
}

/// What a well-known lab address is, for descriptions ("10.96.0.10 (cluster DNS ClusterIP)").
pub(crate) fn role_of_address(address: IpAddr) -> Option<&'static str> {
    let role = match address {
        IpAddr::V4(a) if a == CLUSTER_DNS => "cluster DNS ClusterIP",
        IpAddr::V4(a) if a == CLUSTER_DNS_UPSTREAM => "kube-dns-upstream ClusterIP",
        IpAddr::V6(a) if a == CLUSTER_DNS_V6 => "cluster DNS ClusterIP",
        IpAddr::V4(a) if a == NODE_LOCAL_DNS => "node-local DNS cache",
        IpAddr::V6(a) if a == NODE_LOCAL_DNS_V6 => "node-local DNS cache",
        IpAddr::V4(a) if a == UPSTREAM_DNS => "upstream resolver",
        IpAddr::V6(a) if a == UPSTREAM_DNS_V6 => "upstream resolver",
        IpAddr::V4(a) if a == DEAD_DNS => "dead server: nothing answers",
        IpAddr::V4(a) if a == GONE_DNS => "gone server: nothing answers ARP",
        IpAddr::V4(a) if a == CLOSED_DNS => "host with no DNS server",
        IpAddr::V4(a) if a == ODD_DNS => "server answering REFUSED, SERVFAIL or late",
        a if a.is_loopback() => "loopback: this server itself",
        _ => return None,
    };
    Some(role)
}

/// The namespaces of one node: `<prefix>-node`, `<prefix>-client`, ... on node 0 (the names a
/// one-node lab has always had), `<prefix>-node1`, `<prefix>-client1`, `<prefix>-coredns1a`,
/// ... on node 1 and up. None is longer than `<prefix>-` plus 10 characters.
#[derive(Clone, Debug)]
pub(crate) struct NodeNamespaces {
    node: String,
    /// The pods this node runs, with their namespaces.
    pods: Vec<(Pod, String)>,
}

impl NodeNamespaces {
    fn new(prefix: &str, node: usize, pods: &[Pod]) -> NodeNamespaces {
        let (node_name, pods) = if node == 0 {
            let pods = pods
                .iter()
                .map(|&pod| (pod, format!("{prefix}-{}", pod.name())))
                .collect();
            (format!("{prefix}-node"), pods)
        } else {
            let pods = pods
                .iter()
                .map(|&pod| {
                    let name = match pod {
                        Pod::Client => format!("{prefix}-client{node}"),
                        Pod::CoreDnsA => format!("{prefix}-coredns{node}a"),
                        Pod::CoreDnsB => format!("{prefix}-coredns{node}b"),
                    };
                    (pod, name)
                })
                .collect();
            (format!("{prefix}-node{node}"), pods)
        };
        NodeNamespaces {
            node: node_name,
            pods,
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The namespace of `pod` on this node, if the node runs it.
    pub fn pod(&self, pod: Pod) -> Option<&str> {
        self.pods
            .iter()
            .find(|(known, _)| *known == pod)
            .map(|(_, name)| name.as_str())
    }

    /// The pods this node runs.
    pub fn pods(&self) -> impl Iterator<Item = Pod> + '_ {
        self.pods.iter().map(|(pod, _)| *pod)
    }
}

/// The namespaces of one lab instance: every node's, the shared upstream, and (with two nodes
/// or more) the fabric that joins them.
#[derive(Clone, Debug)]
pub(crate) struct Namespaces {
    prefix: String,
    nodes: Vec<NodeNamespaces>,
    upstream: String,
    fabric: Option<String>,
}

impl Namespaces {
    /// The namespaces of a lab whose node `i` runs the pods `pods_per_node[i]`.
    pub fn new(prefix: &str, pods_per_node: &[Vec<Pod>]) -> Namespaces {
        let nodes = pods_per_node
            .iter()
            .enumerate()
            .map(|(node, pods)| NodeNamespaces::new(prefix, node, pods))
            .collect::<Vec<_>>();
        let fabric = (nodes.len() > 1).then(|| format!("{prefix}-fabric"));
        Namespaces {
            prefix: prefix.to_owned(),
            nodes,
            upstream: format!("{prefix}-upstream"),
            fabric,
        }
    }

    /// Node 0's namespace.
    pub fn node(&self) -> &str {
        self.nodes[0].node()
    }

    /// `pod`'s namespace on node 0 (named even where node 0 does not run the pod).
    pub fn pod(&self, pod: Pod) -> String {
        self.nodes[0]
            .pod(pod)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}-{}", self.prefix, pod.name()))
    }

    /// Node `node`'s namespaces, if the lab has that node.
    pub fn of_node(&self, node: usize) -> Option<&NodeNamespaces> {
        self.nodes.get(node)
    }

    pub fn nodes(&self) -> &[NodeNamespaces] {
        &self.nodes
    }

    /// Node `node`'s namespace, or an error naming the nodes there are.
    pub fn node_of(&self, node: usize) -> anyhow::Result<&str> {
        self.checked_node(node).map(NodeNamespaces::node)
    }

    /// The namespace of `pod` on node `node`, or an error saying which pods the node runs.
    pub fn pod_on(&self, node: usize, pod: Pod) -> anyhow::Result<&str> {
        let names = self.checked_node(node)?;
        names.pod(pod).ok_or_else(|| {
            let pods: Vec<&str> = names.pods().map(|pod| pod.name()).collect();
            anyhow::anyhow!(
                "node {node} of lab `{}` runs no pod {} (it runs {})",
                self.prefix,
                pod.name(),
                pods.join(", ")
            )
        })
    }

    /// The namespace `server` runs in on node `node`, or an error.
    pub fn server_on(&self, node: usize, server: Server) -> anyhow::Result<&str> {
        self.checked_node(node)?;
        self.of_server(node, server).ok_or_else(|| {
            anyhow::anyhow!(
                "node {node} of lab `{}` runs no {}",
                self.prefix,
                server.name()
            )
        })
    }

    fn checked_node(&self, node: usize) -> anyhow::Result<&NodeNamespaces> {
        self.nodes.get(node).ok_or_else(|| {
            anyhow::anyhow!(
                "lab `{}` has no node {node}: its nodes are 0 to {}",
                self.prefix,
                self.nodes.len().saturating_sub(1)
            )
        })
    }

    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The namespace holding the underlay and external bridges (two nodes or more).
    pub fn fabric(&self) -> Option<&str> {
        self.fabric.as_deref()
    }

    /// The namespace `server` of node `node` runs in, if the lab has it.
    pub fn of_server(&self, node: usize, server: Server) -> Option<&str> {
        let names = self.of_node(node)?;
        match server {
            Server::NodeCache => Some(names.node()),
            Server::CoreDnsA => names.pod(Pod::CoreDnsA),
            Server::CoreDnsB => names.pod(Pod::CoreDnsB),
            Server::Upstream | Server::UpstreamDelay | Server::OddUpstream => Some(self.upstream()),
        }
    }

    /// All of them: node 0's (node, then its pods), the upstream, then the other nodes' and the
    /// fabric. A one-node lab lists exactly the five namespaces it always had, in that order.
    pub fn all(&self) -> Vec<&str> {
        let mut all = Vec::new();
        for (index, names) in self.nodes.iter().enumerate() {
            all.push(names.node());
            all.extend(names.pods.iter().map(|(_, name)| name.as_str()));
            if index == 0 {
                all.push(&self.upstream);
            }
        }
        all.extend(self.fabric.as_deref());
        all
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.all().contains(&namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cali_veths_are_named_like_calicos_and_fit_the_kernel() {
        let mut names = Vec::new();
        for node in 0..MAX_NODES {
            for pod in Pod::ALL {
                let name = pod.cali_veth_on(node);
                assert!(
                    name.len() == 15
                        && name.starts_with("cali")
                        && name[4..].chars().all(|c| c.is_ascii_hexdigit()),
                    "{name}"
                );
                names.push(name);
            }
        }
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "every pod's veth has a name of its own");
        assert_eq!(Pod::Client.cali_veth_on(1), Pod::Client.cali_veth_on(1));
    }
}
