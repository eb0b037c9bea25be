//! The node's interfaces, what each one connects, and so which namespaces a packet seen on it
//! leaves and enters.
use dnsloop_core::points::Role;
use std::{
    net::IpAddr,
    os::fd::{AsRawFd, BorrowedFd},
};

use futures::{Stream, StreamExt as _, TryStreamExt as _};
use netlink_sys::{AsyncSocket as _, SocketAddr};
use rtnetlink::{
    constants::{RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR, RTMGRP_LINK},
    packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST},
    packet_route::{
        address::{AddressAttribute, AddressMessage},
        link::{InfoKind, LinkAttribute, LinkInfo, LinkLayerType, LinkMessage},
        nsid::{NsidAttribute, NsidMessage},
        RouteNetlinkMessage,
    },
};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TopologyError {
    #[error("opening a netlink socket failed")]
    Socket(#[source] std::io::Error),
    #[error("listing links over netlink failed")]
    List(#[source] rtnetlink::Error),
    #[error("subscribing to link changes over netlink failed")]
    Subscribe(#[source] std::io::Error),
}

/// A change to the namespace's links, or to the addresses they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// A link appeared, or changed (a link already known may be announced again).
    Added(Link),
    Removed {
        index: u32,
    },
    /// Link `index` took `address` (a cache binding its link-local address, say).
    AddressAdded {
        index: u32,
        address: IpAddr,
    },
    AddressRemoved {
        index: u32,
        address: IpAddr,
    },
}

/// The link and address changes of the calling thread's network namespace, as they happen.
/// The stream ends only if netlink closes the socket.
pub fn link_events() -> Result<impl Stream<Item = LinkEvent>, TopologyError> {
    let (mut connection, _, messages) =
        rtnetlink::new_connection().map_err(TopologyError::Socket)?;
    connection
        .socket_mut()
        .socket_mut()
        .bind(&SocketAddr::new(
            0,
            RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
        ))
        .map_err(TopologyError::Subscribe)?;
    tokio::spawn(connection);
    Ok(messages.filter_map(|(message, _)| async move {
        match message.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => {
                link_of(&link).map(LinkEvent::Added)
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(link)) => {
                Some(LinkEvent::Removed {
                    index: link.header.index,
                })
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(message)) => {
                let (index, address) = held_address(&message)?;
                Some(LinkEvent::AddressAdded { index, address })
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(message)) => {
                let (index, address) = held_address(&message)?;
                Some(LinkEvent::AddressRemoved { index, address })
            }
            _ => None,
        }
    }))
}

/// Every address the calling thread's network namespace holds (of link `index` only, if
/// given), with the link holding it.
pub async fn held_addresses(index: Option<u32>) -> Result<Vec<(u32, IpAddr)>, TopologyError> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(TopologyError::Socket)?;
    let connection = tokio::spawn(connection);
    let request = handle.address().get();
    let request = match index {
        Some(index) => request.set_link_index_filter(index),
        None => request,
    };
    let messages: Result<Vec<AddressMessage>, _> = request.execute().try_collect().await;
    connection.abort();
    Ok(messages
        .map_err(TopologyError::List)?
        .iter()
        .filter_map(held_address)
        .collect())
}

/// The link and the address an address message is about: its local address (on a
/// point-to-point link, `IFA_ADDRESS` is the peer's).
fn held_address(message: &AddressMessage) -> Option<(u32, IpAddr)> {
    let attribute = |local: bool| {
        message
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                AddressAttribute::Local(address) if local => Some(*address),
                AddressAttribute::Address(address) if !local => Some(*address),
                _ => None,
            })
    };
    let address = attribute(true).or_else(|| attribute(false))?;
    Some((message.header.index, address))
}

/// What an interface connects, as far as DNS paths are concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkRole {
    Loopback,
    /// A bridge's own interface: packets cross between the bridge and the node's stack.
    BridgeMaster,
    /// The end of a veth whose other end, interface `peer_index`, is in the namespace this one
    /// knows as `peer_netns_id`: a pod, or any other namespace behind a veth.
    Veth {
        peer_netns_id: i32,
        peer_index: u32,
        bridged: bool,
    },
    /// Anything else: a physical uplink, a dummy or portless bridge holding an address.
    Other {
        bridged: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub role: LinkRole,
    /// False for devices whose frames start at the IP header (WireGuard, tun, ipip...).
    pub ethernet: bool,
    /// Its hardware address, if it has a 6-byte one.
    pub mac: Option<[u8; 6]>,
    /// The bridge (or other controller) it is a port of.
    pub controller: Option<u32>,
}

impl From<&LinkRole> for Role {
    fn from(role: &LinkRole) -> Self {
        match role {
            LinkRole::Loopback => Self::Loopback,
            LinkRole::BridgeMaster => Self::BridgeMaster,
            LinkRole::Veth { bridged, .. } => Self::Veth { bridged: *bridged },
            LinkRole::Other { bridged } => Self::Other { bridged: *bridged },
        }
    }
}

/// Every link of the calling thread's network namespace.
pub async fn list_links() -> Result<Vec<Link>, TopologyError> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(TopologyError::Socket)?;
    let connection = tokio::spawn(connection);
    let messages: Result<Vec<LinkMessage>, _> = handle.link().get().execute().try_collect().await;
    connection.abort();
    Ok(messages
        .map_err(TopologyError::List)?
        .iter()
        .filter_map(link_of)
        .collect())
}

/// The addresses of the calling thread's network namespace, of link `index` only if given,
/// IPv4 first (IPv6 link-local ones left out).
pub async fn addresses(index: Option<u32>) -> Result<Vec<IpAddr>, TopologyError> {
    let held = held_addresses(index).await?;
    Ok(naming_order(held.into_iter().map(|(_, address)| address)))
}

/// `addresses` as a namespace is named and described by them: IPv4 first, IPv6 link-local
/// ones left out.
pub fn naming_order(addresses: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = addresses
        .into_iter()
        .filter(|address| !matches!(address, IpAddr::V6(v6) if v6.is_unicast_link_local()))
        .collect();
    addresses.sort_by_key(IpAddr::is_ipv6);
    addresses
}

fn link_of(message: &LinkMessage) -> Option<Link> {
    let mut name = None;
    let mut kind = None;
    let mut peer_netns_id = None;
    let mut peer_index = None;
    let (mut mac, mut controller) = (None, None);
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::IfName(value) => name = Some(value.clone()),
            LinkAttribute::LinkNetNsId(id) => peer_netns_id = Some(*id),
            LinkAttribute::Link(index) => peer_index = Some(*index),
            LinkAttribute::Controller(index) => controller = Some(*index),
            LinkAttribute::Address(address) => mac = <[u8; 6]>::try_from(address.as_slice()).ok(),
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
    let bridged = controller.is_some();
    let role = match (link_type, kind, peer_index, peer_netns_id) {
        (LinkLayerType::Loopback, ..) => LinkRole::Loopback,
        (_, Some(InfoKind::Bridge), ..) => LinkRole::BridgeMaster,
        (_, Some(InfoKind::Veth), Some(peer_index), Some(peer_netns_id)) => LinkRole::Veth {
            peer_netns_id,
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
        mac,
        controller,
    })
}

/// Asks the kernel which id the calling thread's namespace knows other namespaces by (the
/// `peer_netns_id` of a veth leading there), over one netlink connection for all the asking.
pub struct NetnsIds {
    handle: rtnetlink::Handle,
    connection: tokio::task::JoinHandle<()>,
}

impl NetnsIds {
    pub fn open() -> Result<Self, TopologyError> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(TopologyError::Socket)?;
        Ok(Self {
            handle,
            connection: tokio::spawn(connection),
        })
    }

    /// The id of the namespace open as `namespace`; `None` when it has none.
    pub async fn of(&mut self, namespace: BorrowedFd<'_>) -> Result<Option<i32>, TopologyError> {
        let mut request = NsidMessage::default();
        request
            .attributes
            .push(NsidAttribute::Fd(namespace.as_raw_fd() as u32));
        let mut message = NetlinkMessage::from(RouteNetlinkMessage::GetNsId(request));
        message.header.flags = NLM_F_REQUEST;
        let mut replies = self.handle.request(message).map_err(TopologyError::List)?;
        let mut id = None;
        while let Some(reply) = replies.next().await {
            if let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNsId(reply)) = reply.payload
            {
                id = reply
                    .attributes
                    .iter()
                    .find_map(|attribute| match attribute {
                        NsidAttribute::Id(id) if *id >= 0 => Some(*id),
                        _ => None,
                    });
            }
        }
        Ok(id)
    }
}

impl Drop for NetnsIds {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address_message(index: u32, attributes: Vec<AddressAttribute>) -> AddressMessage {
        let mut message = AddressMessage::default();
        message.header.index = index;
        message.attributes = attributes;
        message
    }

    #[test]
    fn an_address_is_its_local_address_when_it_has_one() {
        let local: IpAddr = "10.0.0.1".parse().unwrap();
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        // A point-to-point link: IFA_ADDRESS is the peer's.
        let message = address_message(
            3,
            vec![
                AddressAttribute::Address(peer),
                AddressAttribute::Local(local),
            ],
        );
        assert_eq!(held_address(&message), Some((3, local)));
        let message = address_message(4, vec![AddressAttribute::Address(local)]);
        assert_eq!(held_address(&message), Some((4, local)));
        assert_eq!(held_address(&address_message(5, vec![])), None);
    }
}
