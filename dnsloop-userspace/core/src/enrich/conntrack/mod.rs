//! What conntrack knows about a query's flow, asked over ctnetlink in the calling thread's
//! network namespace.
mod message;

use std::{
    io,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use thiserror::Error;

use netlink_sys::protocols::NETLINK_NETFILTER;

use super::netlink_socket::NetlinkSocket;
use crate::{finding::ConntrackEvidence, observation::Transport};

/// How long a lookup may wait for the kernel: enrichment runs inline with the analysis, and a
/// finding without evidence is better than a late one.
const REPLY_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(Debug, Error)]
pub enum ConntrackError {
    #[error("client {client} and server {server} are of different address families")]
    MixedFamilies { client: IpAddr, server: IpAddr },
    #[error("opening a netfilter netlink socket failed")]
    Open(#[source] io::Error),
    #[error("sending the conntrack request failed")]
    Send(#[source] io::Error),
    #[error("receiving the conntrack reply failed (or timed out)")]
    Receive(#[source] io::Error),
    #[error("the kernel refused the conntrack request")]
    Refused(#[source] io::Error),
    #[error("decoding the conntrack reply failed")]
    Decode(#[source] netlink_packet_core::DecodeError),
    #[error("unexpected conntrack reply: {0}")]
    Unexpected(&'static str),
}

/// A query's flow, from the client to a server: where it sent the query, or where the query was
/// delivered after DNAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueryFlow {
    pub transport: Transport,
    pub client: SocketAddr,
    pub server: SocketAddr,
}

/// Which of its two tuples an entry is asked for by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyTuple {
    /// The query as the client sent it, before any NAT.
    Original,
    /// Replies, from where the query was delivered back to the client: after DNAT.
    Reply,
}

/// The conntrack table of the network namespace the first lookup ran in: the socket is opened
/// then, and a netlink socket stays bound to the namespace it was opened in.
#[derive(Debug, Default)]
pub struct ConntrackTable {
    socket: Option<NetlinkSocket>,
}

impl ConntrackTable {
    /// The entry whose original tuple is `flow`; `Ok(None)` when conntrack has none.
    pub fn lookup(
        &mut self,
        flow: &QueryFlow,
    ) -> Result<Option<ConntrackEvidence>, ConntrackError> {
        self.get(flow, KeyTuple::Original)
    }

    /// The entry of `flow`, a query seen after any DNAT, found by its reply tuple (from
    /// `flow.server` back to `flow.client`): its original destination is where the client sent
    /// the query. `Ok(None)` when conntrack has none.
    pub fn lookup_delivered(
        &mut self,
        flow: &QueryFlow,
    ) -> Result<Option<ConntrackEvidence>, ConntrackError> {
        self.get(flow, KeyTuple::Reply)
    }

    fn get(
        &mut self,
        flow: &QueryFlow,
        by: KeyTuple,
    ) -> Result<Option<ConntrackEvidence>, ConntrackError> {
        let request = message::get_request(flow, by)?;
        let socket = match &mut self.socket {
            Some(socket) => socket,
            None => self.socket.insert(
                NetlinkSocket::open(NETLINK_NETFILTER, REPLY_TIMEOUT)
                    .map_err(ConntrackError::Open)?,
            ),
        };
        let result = socket
            .send(&request)
            .map_err(ConntrackError::Send)
            .and_then(|()| socket.receive().map_err(ConntrackError::Receive))
            .and_then(|reply| message::parse_reply(&reply));
        if result.is_err() {
            // The kernel may still answer a request we gave up on; a fresh socket next time
            // never mistakes that late answer for the answer to the next request.
            self.socket = None;
        }
        result
    }
}
