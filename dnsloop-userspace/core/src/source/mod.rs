//! Where packets come from. Every source yields [`RawPacket`]s, which the decoder turns into
//! observations; nothing downstream knows which source it was.
pub mod capture_file;

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::SystemTime,
};

use crate::{
    observation::DnsName,
    points::{InterfaceRef, Seen},
};
use dnsloop_shared::{
    parse::{IpFamily, LinkLayer},
    point::Direction,
};

/// One packet as captured: when, where, and its first bytes from the start of the frame.
#[derive(Clone, Debug)]
pub struct RawPacket {
    pub ts: SystemTime,
    pub seen: Seen,
    pub link_layer: LinkLayer,
    /// The packet's first bytes: all of it, or up to the snap length.
    pub bytes: bytes::Bytes,
    /// For a reply from an unexpected source, or a query sent again unanswered, the query's
    /// first sending as the kernel remembered it (it was not streamed).
    pub matched_query: Option<MatchedQuery>,
    /// For the query that made its question hot: the last, unstreamed, sighting before it of the
    /// query it forwards.
    pub priors: Vec<PriorSighting>,
    /// Streamed only to be recorded (`trace --record`): the recorder keeps it, the analysis
    /// passes over it, as a trace without recording never sees it.
    pub recorder_only: bool,
}

/// A packet the kernel dropped, from its IP header on, as the drop program streamed it.
#[derive(Clone, Debug)]
pub struct DroppedPacket {
    pub ts: SystemTime,
    /// The drop reason's name in the running kernel.
    pub reason: std::sync::Arc<str>,
    /// The kernel function that dropped it, when its symbols are readable.
    pub location: Option<std::sync::Arc<str>>,
    /// The device it was on, in that device's namespace (0 for none).
    pub device: InterfaceRef,
    pub bytes: bytes::Bytes,
}

/// A query sighting the kernel counted but did not stream, in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorSighting {
    pub at: SystemTime,
    pub seen: Seen,
    pub src: std::net::SocketAddr,
    pub dst: std::net::SocketAddr,
    pub id: u16,
    pub tcp: bool,
}

/// A query as the kernel remembered it: first seen at `at`, on the reply's interface in
/// `direction`, addressed to `server` (in the reply's address family; IPv4 in the first 4
/// bytes) port `server_port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchedQuery {
    pub at: SystemTime,
    pub direction: Direction,
    pub via_gateway: bool,
    pub server: [u8; 16],
    pub server_port: u16,
}

/// The link layer a kernel record names.
pub fn link_layer(raw: u8) -> Option<LinkLayer> {
    [
        LinkLayer::Ethernet,
        LinkLayer::RawIp,
        LinkLayer::LinuxSll,
        LinkLayer::LinuxSll2,
    ]
    .into_iter()
    .find(|layer| *layer as u8 == raw)
}

/// The address family a kernel record names.
pub fn ip_family(raw: u8) -> Option<IpFamily> {
    [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .find(|family| *family as u8 == raw)
}

/// An address as the kernel and the shared parser hold it: 16 bytes, IPv4 in the first 4.
pub fn socket_addr(family: IpFamily, addr: &[u8; 16], port: u16) -> SocketAddr {
    let ip = match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3])),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(*addr)),
    };
    SocketAddr::new(ip, port)
}

/// A query first seen at `at`, where `seen` says, that got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnansweredQuery {
    pub at: SystemTime,
    pub seen: Seen,
    pub tcp: bool,
    pub client: SocketAddr,
    /// Where the client sent it, before any DNAT.
    pub server: SocketAddr,
    pub id: u16,
    pub name: DnsName,
    pub qtype: u16,
    pub qclass: u16,
}
