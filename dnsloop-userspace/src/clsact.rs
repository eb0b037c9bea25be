//! The clsact qdisc, where classifiers attach on kernels without TCX (before Linux 6.6): added
//! where it is missing, and removed again on exit when dnsloop added it and nothing else uses
//! it. Everything here acts on the calling thread's network namespace.
use std::io;

use aya::programs::tc::{self, TcError};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::{
    tc::{TcHandle, TcMessage},
    RouteNetlinkMessage,
};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Whether dnsloop added the qdisc, and so may remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qdisc {
    Added,
    AlreadyThere,
}

/// Adds the clsact qdisc to `interface` unless it has one.
pub fn ensure(interface: &str) -> Result<Qdisc, TcError> {
    match tc::qdisc_add_clsact(interface) {
        Ok(()) => Ok(Qdisc::Added),
        Err(TcError::NetlinkError(error)) if error.raw_os_error() == Some(libc::EEXIST) => {
            Ok(Qdisc::AlreadyThere)
        }
        Err(error) => Err(error),
    }
}

/// Removes the clsact qdisc of interface `index` if no filter is left on it, in either
/// direction: another tool (or another dnsloop) may have attached to the qdisc dnsloop added.
/// Returns whether it was removed. An interface or qdisc that is already gone is not an error.
///
/// A filter added between the check and the removal would go with the qdisc; the window is one
/// netlink round trip at exit.
pub fn remove_if_unused(index: u32) -> io::Result<bool> {
    let socket = RouteSocket::open()?;
    for direction in [TcHandle::MIN_INGRESS, TcHandle::MIN_EGRESS] {
        let filters = socket.dump_filters(index, direction);
        match filters {
            Ok(0) => {}
            Ok(_) => return Ok(false),
            Err(error) if is_gone(&error) => return Ok(false),
            Err(error) => return Err(error),
        }
    }
    match socket.delete_clsact(index) {
        Ok(()) => Ok(true),
        Err(error) if is_gone(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// ENODEV: the interface is gone; EINVAL/ENOENT: it has no clsact qdisc (any more).
fn is_gone(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENODEV | libc::EINVAL | libc::ENOENT)
    )
}

struct RouteSocket {
    socket: Socket,
}

impl RouteSocket {
    fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        // Port 0 is the kernel, which answers route requests while they are made.
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self { socket })
    }

    /// How many filters (and filter chains) hang off clsact's `direction` of interface `index`.
    fn dump_filters(&self, index: u32, direction: u16) -> io::Result<usize> {
        let mut message = tc_message(index);
        message.header.parent = TcHandle {
            major: TcHandle::CLSACT.major,
            minor: direction,
        };
        self.request(
            RouteNetlinkMessage::GetTrafficFilter(message),
            NLM_F_REQUEST | NLM_F_DUMP,
        )
    }

    fn delete_clsact(&self, index: u32) -> io::Result<()> {
        let mut message = tc_message(index);
        message.header.parent = TcHandle::CLSACT;
        message.header.handle = TcHandle {
            major: TcHandle::CLSACT.major,
            minor: 0,
        };
        self.request(
            RouteNetlinkMessage::DelQueueDiscipline(message),
            NLM_F_REQUEST | NLM_F_ACK,
        )
        .map(|_| ())
    }

    /// Sends `message` and reads replies until the kernel's acknowledgement or the end of the
    /// dump; returns how many messages the kernel answered with before it.
    fn request(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<usize> {
        let mut request = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(message),
        );
        request.header.flags = flags;
        request.header.sequence_number = 1;
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;

        let mut answers = 0;
        loop {
            let (reply, _kernel) = self.socket.recv_from_full()?;
            let mut rest = reply.as_slice();
            while !rest.is_empty() {
                let length = rest
                    .get(..4)
                    .map(|bytes| u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                    .map_or(0, |length| length as usize);
                if length < 16 || length > rest.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed netlink reply",
                    ));
                }
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..length])
                    .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
                match message.payload {
                    NetlinkPayload::Done(done) if done.code < 0 => {
                        return Err(io::Error::from_raw_os_error(-done.code))
                    }
                    NetlinkPayload::Done(_) => return Ok(answers),
                    NetlinkPayload::Error(error) => {
                        return match error.code {
                            None => Ok(answers),
                            Some(_) => Err(error.to_io()),
                        }
                    }
                    _ => answers += 1,
                }
                // Messages are 4-byte aligned.
                rest = rest.get(length.next_multiple_of(4)..).unwrap_or_default();
            }
        }
    }
}

fn tc_message(index: u32) -> TcMessage {
    // Interface indexes are positive i32 in the kernel.
    TcMessage::with_index(index as i32)
}
