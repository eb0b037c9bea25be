//! The node's interfaces, what each one connects, and so which namespaces a packet seen on it
//! leaves and enters.
use std::net::IpAddr;

use futures::TryStreamExt as _;
use rtnetlink::packet_route::{
    address::{AddressAttribute, AddressMessage},
    link::{InfoKind, LinkAttribute, LinkInfo, LinkLayerType, LinkMessage},
};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TopologyError {
    #[error("opening a netlink socket failed")]
    Socket(#[source] std::io::Error),
    #[error("listing links over netlink failed")]
    List(#[source] rtnetlink::Error),
}

/// What an interface connects, as far as DNS paths are concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkRole {
    Loopback,
    /// A bridge's own interface: packets cross between the bridge and the node's stack.
    BridgeMaster,
    /// The end of a veth whose other end, interface `peer_index`, is in another namespace: a
    /// pod, or any other namespace behind a veth.
    Veth { peer_index: u32, bridged: bool },
    /// Anything else: a physical uplink, a dummy or portless bridge holding an address.
    Other { bridged: bool },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub role: LinkRole,
    /// False for devices whose frames start at the IP header (WireGuard, tun, ipip...).
    pub ethernet: bool,
}

/// Every link of the calling thread's network namespace.
pub async fn list_links() -> Result<Vec<Link>, TopologyError> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(TopologyError::Socket)?;
    let connection = tokio::spawn(connection);
    let messages: Result<Vec<LinkMessage>, _> =
        handle.link().get().execute().try_collect().await;
    connection.abort();
    Ok(messages
        .map_err(TopologyError::List)?
        .iter()
        .filter_map(link_of)
        .collect())
}

/// The addresses on link `index` of the calling thread's network namespace, IPv4 first.
pub async fn addresses(index: u32) -> Result<Vec<IpAddr>, TopologyError> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(TopologyError::Socket)?;
    let connection = tokio::spawn(connection);
    let messages: Result<Vec<AddressMessage>, _> = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect()
        .await;
    connection.abort();
    let mut addresses: Vec<IpAddr> = messages
        .map_err(TopologyError::List)?
        .iter()
        .flat_map(|message| &message.attributes)
        .filter_map(|attribute| match attribute {
            AddressAttribute::Address(address) => Some(*address),
            _ => None,
        })
        .filter(|address| !matches!(address, IpAddr::V6(v6) if v6.is_unicast_link_local()))
        .collect();
    addresses.sort_by_key(IpAddr::is_ipv6);
    Ok(addresses)
}

fn link_of(message: &LinkMessage) -> Option<Link> {
    let mut name = None;
    let mut kind = None;
    let mut peer_in_other_namespace = false;
    let mut peer_index = None;
    let mut bridged = false;
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::IfName(value) => name = Some(value.clone()),
            LinkAttribute::LinkNetNsId(_) => peer_in_other_namespace = true,
            LinkAttribute::Link(index) => peer_index = Some(*index),
            LinkAttribute::Controller(_) => bridged = true,
            LinkAttribute::LinkInfo(infos) => {
                kind = infos.iter().find_map(|info| match info {
                    LinkInfo::Kind(kind) => Some(kind.clone()),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    let link_type = message.header.link_layer_type;
    let role = match (link_type, kind, peer_index) {
        (LinkLayerType::Loopback, _, _) => LinkRole::Loopback,
        (_, Some(InfoKind::Bridge), _) => LinkRole::BridgeMaster,
        (_, Some(InfoKind::Veth), Some(peer_index)) if peer_in_other_namespace => LinkRole::Veth {
            peer_index,
            bridged,
        },
        _ => LinkRole::Other { bridged },
    };
    Some(Link {
        index: message.header.index,
        name: name?,
        role,
        ethernet: matches!(link_type, LinkLayerType::Ether | LinkLayerType::Loopback),
    })
}
