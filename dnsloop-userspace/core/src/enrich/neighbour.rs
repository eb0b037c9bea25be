//! What the node's neighbour table says of a server that did not answer: a query to an address
//! on a directly attached network whose host never answers ARP (or neighbour discovery) waits
//! in the neighbour queue, and the kernel drops it (`NEIGH_FAILED`) only seconds after the
//! resolver gave up on it. Until then, the table's entry says why: `INCOMPLETE` or `FAILED`.
use std::{ffi::CStr, io, net::IpAddr, time::Duration};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::{
    neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState},
    AddressFamily, RouteNetlinkMessage,
};
use netlink_sys::protocols::NETLINK_ROUTE;

use super::netlink_socket::NetlinkSocket;

/// How long a lookup may wait for the kernel, as for conntrack.
const REPLY_TIMEOUT: Duration = Duration::from_millis(100);

/// Datagrams of one dump read at most: a node's neighbour table fits in a few.
const MAX_DUMP_DATAGRAMS: usize = 64;

/// An address the node is still trying, or failed, to find a neighbour for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    /// The device the node looks for it on (`if7` when the name cannot be had).
    pub device: String,
    pub failed: bool,
}

/// Whether the neighbour table of the calling thread's network namespace holds `address` as
/// unresolved. `Ok(None)`: no such entry (resolved, or not on an attached network).
pub fn unresolved(address: IpAddr) -> io::Result<Option<Unresolved>> {
    let socket = NetlinkSocket::open(NETLINK_ROUTE, REPLY_TIMEOUT)?;
    socket.send(&dump_request(address))?;
    for _ in 0..MAX_DUMP_DATAGRAMS {
        let datagram = socket.receive()?;
        let mut rest = datagram.as_slice();
        while !rest.is_empty() {
            let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
            let length = usize::try_from(message.header.length)
                .unwrap_or(usize::MAX)
                .max(1);
            rest = rest.get(length..).unwrap_or_default();
            match message.payload {
                NetlinkPayload::Done(_) => return Ok(None),
                NetlinkPayload::Error(error) => return Err(error.to_io()),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(entry)) => {
                    if let Some(found) = unresolved_entry(&entry, address) {
                        return Ok(Some(found));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(None)
}

fn dump_request(address: IpAddr) -> Vec<u8> {
    let mut entry = NeighbourMessage::default();
    entry.header.family = match address {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut message = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetNeighbour(entry)),
    );
    message.finalize();
    let mut request = vec![0; message.buffer_len()];
    message.serialize(&mut request);
    request
}

/// `entry`, if it is `address`'s and unresolved.
fn unresolved_entry(entry: &NeighbourMessage, address: IpAddr) -> Option<Unresolved> {
    let failed = match entry.header.state {
        NeighbourState::Failed => true,
        NeighbourState::Incomplete => false,
        _ => return None,
    };
    let of_address = entry.attributes.iter().any(|attribute| match attribute {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(found)) => address == *found,
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(found)) => address == *found,
        _ => false,
    });
    of_address.then(|| Unresolved {
        device: device_name(entry.header.ifindex),
        failed,
    })
}

/// The name of interface `index` in the calling thread's namespace.
fn device_name(index: u32) -> String {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes, NUL included, into `name`.
    let found = unsafe { libc::if_indextoname(index, name.as_mut_ptr()) };
    if found.is_null() {
        return format!("if{index}");
    }
    // SAFETY: on success `name` holds a NUL-terminated string.
    unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

impl Unresolved {
    /// `no host answers ARP for 10.99.0.53 on cni0 (neighbour entry INCOMPLETE)`.
    pub fn explain(&self, address: IpAddr) -> String {
        let protocol = if address.is_ipv4() {
            "ARP"
        } else {
            "neighbour discovery"
        };
        let state = if self.failed { "FAILED" } else { "INCOMPLETE" };
        format!(
            "no host answers {protocol} for {address} on {} (neighbour entry {state}): \
             the server is gone from that network",
            self.device
        )
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn entry(state: NeighbourState, address: Ipv4Addr) -> NeighbourMessage {
        let mut entry = NeighbourMessage::default();
        entry.header.state = state;
        entry.header.ifindex = 1;
        entry
            .attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(
                address,
            )));
        entry
    }

    #[test]
    fn an_address_nothing_answered_arp_for_is_unresolved_and_said_so() {
        let gone = Ipv4Addr::new(10, 99, 0, 53);
        let found = unresolved_entry(&entry(NeighbourState::Incomplete, gone), gone.into())
            .expect("unresolved");
        assert!(!found.failed);
        let said = found.explain(gone.into());
        assert!(
            said.starts_with("no host answers ARP for 10.99.0.53 on ")
                && said.contains("(neighbour entry INCOMPLETE)"),
            "{said}"
        );
        assert!(
            unresolved_entry(&entry(NeighbourState::Failed, gone), gone.into())
                .is_some_and(|found| found.failed)
        );
    }

    #[test]
    fn a_resolved_or_other_address_is_not() {
        let gone = Ipv4Addr::new(10, 99, 0, 53);
        let other = Ipv4Addr::new(10, 99, 0, 54);
        assert_eq!(
            unresolved_entry(&entry(NeighbourState::Reachable, gone), gone.into()),
            None
        );
        assert_eq!(
            unresolved_entry(&entry(NeighbourState::Incomplete, other), gone.into()),
            None
        );
    }
}
