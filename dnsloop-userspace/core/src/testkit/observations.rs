//! Synthetic observations for tests, written the way a packet walks through a node.
//!
//! The node of the tests is the lab's: pods on the bridge `cni0` behind `veth-*` ports, the
//! node-local cache on 169.254.25.10 in the node's namespace, CoreDNS in pod 10.244.0.3 behind
//! the ClusterIP 10.96.0.10, and an upstream beyond `eth0`. `message(..).route(&[..])` yields
//! the sightings of one message at consecutive points, 10 µs apart.
use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::{parse::Probe, point::Direction};

use crate::{
    analyzers::{packet::MessageKey, Analyzer},
    finding::Finding,
    observation::{DnsName, Namespace, Observation, Point, Question, Transport},
    points::NODE,
};

pub const CLIENT: &str = "pod 10.244.0.2";
pub const COREDNS: &str = "pod 10.244.0.3";

pub const A: u16 = 1;
pub const TXT: u16 = 16;
pub const HINFO: u16 = 13;

/// One observation point and the namespaces a packet leaves and enters there.
#[derive(Clone, Copy, Debug)]
pub struct Spot {
    pub ifname: &'static str,
    pub direction: Direction,
    pub leaves: Option<&'static str>,
    pub enters: Option<&'static str>,
}

pub const fn spot(
    ifname: &'static str,
    direction: Direction,
    leaves: Option<&'static str>,
    enters: Option<&'static str>,
) -> Spot {
    Spot {
        ifname,
        direction,
        leaves,
        enters,
    }
}

use Direction::{Egress, Ingress};

// Bridge ports: between the bridge (unwatched) and the pod behind the port.
pub const CLIENT_OUT: Spot = spot("veth-client", Ingress, Some(CLIENT), None);
pub const CLIENT_IN: Spot = spot("veth-client", Egress, None, Some(CLIENT));
pub const COREDNS_OUT: Spot = spot("veth-coredns-a", Ingress, Some(COREDNS), None);
pub const COREDNS_IN: Spot = spot("veth-coredns-a", Egress, None, Some(COREDNS));
// The bridge's own interface: between the bridge and the node's stack.
pub const NODE_FROM_BRIDGE: Spot = spot("cni0", Ingress, None, Some(NODE));
pub const NODE_TO_BRIDGE: Spot = spot("cni0", Egress, Some(NODE), None);
// The uplink.
pub const NODE_TO_UPLINK: Spot = spot("eth0", Egress, Some(NODE), None);
pub const NODE_FROM_UPLINK: Spot = spot("eth0", Ingress, None, Some(NODE));
// The overlay: a VXLAN device to the other nodes, whose far side is out of sight.
pub const NODE_TO_OVERLAY: Spot = spot("vxlan0", Egress, Some(NODE), None);
pub const NODE_FROM_OVERLAY: Spot = spot("vxlan0", Ingress, None, Some(NODE));
// Loopbacks: a packet leaves and enters the same namespace.
pub const NODE_LO: Spot = spot("lo", Egress, Some(NODE), Some(NODE));
pub const COREDNS_B: &str = "pod 10.244.0.4";
pub const COREDNS_B_OUT: Spot = spot("veth-coredns-b", Ingress, Some(COREDNS_B), None);
pub const COREDNS_B_IN: Spot = spot("veth-coredns-b", Egress, None, Some(COREDNS_B));
pub const COREDNS_LO: Spot = spot("lo", Egress, Some(COREDNS), Some(COREDNS));
// A routed CNI (point-to-point veths, no bridge): pods connect straight to the node.
pub const POD_B: &str = "pod 10.244.1.5";
pub const POD_B_TO_NODE: Spot = spot("cali-b", Ingress, Some(POD_B), Some(NODE));
pub const COREDNS_TO_NODE: Spot = spot("cali-coredns", Ingress, Some(COREDNS), Some(NODE));
pub const NODE_TO_COREDNS: Spot = spot("cali-coredns", Egress, Some(NODE), Some(COREDNS));

/// Times are counted from 2025-01-01 12:00:00 UTC.
pub fn ms(ms: u64) -> SystemTime {
    us(ms * 1000)
}

pub fn us(us: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_732_800) + Duration::from_micros(us)
}

pub fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a test address")
}

pub fn name_wire(name: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    for label in name.split('.').filter(|label| !label.is_empty()) {
        wire.push(label.len() as u8);
        wire.extend_from_slice(label.as_bytes());
    }
    wire.push(0);
    wire
}

/// A message under construction; by default a UDP `A` query from the client to the node cache.
#[derive(Clone, Debug)]
pub struct Message {
    obs: Observation,
}

pub fn query(name: &str) -> Message {
    Message::new(DnsName::from_wire(&name_wire(name)).expect("a test name"))
}

pub fn reply(name: &str) -> Message {
    let mut message = query(name);
    message.obs.is_response = true;
    message
}

impl Message {
    pub fn new(name: DnsName) -> Self {
        Self {
            obs: Observation {
                ts: ms(0),
                point: point(CLIENT_OUT),
                transport: Transport::Udp,
                src: addr("10.244.0.2:41234"),
                dst: addr("169.254.25.10:53"),
                id: 1,
                is_response: false,
                opcode: 0,
                rcode: 0,
                truncated: false,
                question: Some(Question {
                    name,
                    qtype: A,
                    qclass: 1,
                }),
                probe: Probe::None,
                size: 40,
                partial: false,
                recalled: false,
                // As the tracer tells from the node's addresses.
                to_own_address: Some(true),
                edns_udp_size: None,
            },
        }
    }

    pub fn id(mut self, id: u16) -> Self {
        self.obs.id = id;
        self
    }

    pub fn qtype(mut self, qtype: u16) -> Self {
        if let Some(question) = &mut self.obs.question {
            question.qtype = qtype;
        }
        self
    }

    pub fn probe(mut self, probe: Probe) -> Self {
        self.obs.probe = probe;
        self
    }

    pub fn tcp(mut self) -> Self {
        self.obs.transport = Transport::Tcp;
        self
    }

    pub fn rcode(mut self, rcode: u16) -> Self {
        self.obs.rcode = rcode;
        self
    }

    /// A query whose OPT record advertises `size` bytes of UDP payload.
    pub fn edns(mut self, size: u16) -> Self {
        self.obs.edns_udp_size = Some(size);
        self
    }

    /// A message of `size` bytes.
    pub fn size(mut self, size: usize) -> Self {
        self.obs.size = size;
        self
    }

    /// An answer with TC set.
    pub fn truncated(mut self) -> Self {
        self.obs.truncated = true;
        self
    }

    pub fn from(mut self, src: &str) -> Self {
        self.obs.src = addr(src);
        self
    }

    pub fn to(mut self, dst: &str) -> Self {
        self.obs.dst = addr(dst);
        self
    }

    /// Whether its destination is an address of the namespace it enters (`None`: not known,
    /// as in a capture); by default it is, as the tracer tells from the node's addresses.
    pub fn to_own_address(mut self, own: Option<bool>) -> Self {
        self.obs.to_own_address = own;
        self
    }

    pub fn at_ms(mut self, at: u64) -> Self {
        self.obs.ts = ms(at);
        self
    }

    pub fn at_us(mut self, at: u64) -> Self {
        self.obs.ts = us(at);
        self
    }

    /// The message as seen at `spot`.
    pub fn seen(mut self, spot: Spot) -> Observation {
        self.obs.point = point(spot);
        self.obs
    }

    /// The message as seen at each of `spots` in turn, 10 µs apart.
    pub fn route(self, spots: &[Spot]) -> Vec<Observation> {
        let start = self.obs.ts;
        (0u64..)
            .zip(spots)
            .map(|(step, &spot)| {
                let mut obs = self.clone().seen(spot);
                obs.ts = start + Duration::from_micros(10 * step);
                obs
            })
            .collect()
    }
}

fn point(spot: Spot) -> Arc<Point> {
    Arc::new(Point {
        ifname: spot.ifname.into(),
        direction: spot.direction,
        leaves: spot.leaves.map(Namespace::new),
        enters: spot.enters.map(Namespace::new),
    })
}

/// The client pod's query `id` for `a.test.` to the cluster DNS service, at `at` ms.
pub fn client_asks(id: u16, at: u64) -> Observation {
    query("a.test.")
        .id(id)
        .to("10.96.0.10:53")
        .at_ms(at)
        .seen(CLIENT_OUT)
}

/// A reply from `from` to `client_asks(id, _)`, reaching the client at `at` ms.
pub fn client_gets_reply(id: u16, from: &str, at: u64) -> Observation {
    reply("a.test.")
        .id(id)
        .from(from)
        .to("10.244.0.2:41234")
        .at_ms(at)
        .seen(CLIENT_IN)
}

/// Feeds `obs` to `analyzer` as the engine does, with its message's key.
pub fn observe(analyzer: &mut impl Analyzer, obs: &Observation, out: &mut Vec<Finding>) {
    analyzer.observe(obs, MessageKey::of(obs).as_ref(), out);
}

/// Feeds `observations` to `analyzer` in timestamp order, as the engine would, then lets time
/// run to `end`; returns every finding.
pub fn run(
    analyzer: &mut impl Analyzer,
    mut observations: Vec<Observation>,
    end: SystemTime,
) -> Vec<Finding> {
    observations.sort_by_key(|obs| obs.ts);
    let mut findings = Vec::new();
    for obs in &observations {
        observe(analyzer, obs, &mut findings);
    }
    analyzer.tick(end, &mut findings);
    findings
}
