//! The clsact qdisc, where classifiers attach on kernels without TCX (before Linux 6.6): added
//! where it is missing, and removed again on exit when dnsloop added it and nothing else uses
//! it; and the BPF filters on it, listed and removed one by one. Everything here acts on the
//! calling thread's network namespace.
use std::io;

use aya::programs::tc::{self, TcError};
use dnsloop_shared::point::Direction;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::{
    tc::{TcAttribute, TcFilterBpfOption, TcHandle, TcMessage, TcOption},
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
    for direction in [Direction::Ingress, Direction::Egress] {
        let filters = socket.dump_filters(index, direction);
        match filters {
            Ok(filters) if filters.is_empty() => {}
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

/// How an operator finds and removes dnsloop's filters by hand.
pub const REMOVE_BY_HAND: &str = "`tc filter show dev IFACE ingress|egress` lists them (named \
     dnsloop_ingress, dnsloop_egress) and `tc filter del dev IFACE ingress|egress pref PREF` \
     removes one";

/// A BPF classifier on a clsact qdisc, as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfFilter {
    /// Its `pref`: the kernel gives each filter dnsloop adds one of its own.
    pub priority: u16,
    /// The protocol it classifies and its handle, which with the priority name it alone.
    protocol: u16,
    handle: TcHandle,
    /// The name it was attached with: the program's.
    pub name: String,
    pub program_id: u32,
}

impl BpfFilter {
    /// The BPF classifier `message` lists, if it lists one (a dump also lists each priority's
    /// filter chain on its own, without a program).
    fn of(message: &TcMessage) -> Option<Self> {
        let mut kind_is_bpf = false;
        let (mut name, mut program_id) = (None, None);
        for attribute in &message.attributes {
            match attribute {
                TcAttribute::Kind(kind) => kind_is_bpf = kind == "bpf",
                TcAttribute::Options(options) => {
                    for option in options {
                        match option {
                            TcOption::Bpf(TcFilterBpfOption::ProgName(found)) => {
                                name = Some(found.clone())
                            }
                            TcOption::Bpf(TcFilterBpfOption::ProgId(id)) => program_id = Some(*id),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        let info = message.header.info;
        Some(Self {
            priority: (info >> 16) as u16,
            protocol: info as u16,
            handle: message.header.handle,
            name: name.filter(|_| kind_is_bpf)?,
            program_id: program_id?,
        })
    }
}

/// The BPF classifiers on `direction` of interface `index`'s clsact qdisc.
pub fn bpf_filters(index: u32, direction: Direction) -> io::Result<Vec<BpfFilter>> {
    let listed = RouteSocket::open()?.dump_filters(index, direction)?;
    Ok(listed
        .iter()
        .filter_map(|message| match message {
            RouteNetlinkMessage::NewTrafficFilter(message) => BpfFilter::of(message),
            _ => None,
        })
        .collect())
}

/// Removes `filter` from `direction` of interface `index`, and nothing else: other filters at
/// its priority (there are none for dnsloop's) stay.
pub fn delete_filter(index: u32, direction: Direction, filter: &BpfFilter) -> io::Result<()> {
    let mut message = tc_message(index);
    message.header.parent = clsact_parent(direction);
    message.header.handle = filter.handle;
    message.header.info = u32::from(filter.priority) << 16 | u32::from(filter.protocol);
    RouteSocket::open()?
        .request(
            RouteNetlinkMessage::DelTrafficFilter(message),
            NLM_F_REQUEST | NLM_F_ACK,
        )
        .map(|_| ())
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

    /// The filters (and filter chains) hanging off clsact's `direction` of interface `index`.
    fn dump_filters(
        &self,
        index: u32,
        direction: Direction,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let mut message = tc_message(index);
        message.header.parent = clsact_parent(direction);
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
    /// dump; returns the messages the kernel answered with before it.
    fn request(
        &self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
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

        let mut answers = Vec::new();
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
                    NetlinkPayload::InnerMessage(answer) => answers.push(answer),
                    _ => {}
                }
                // Messages are 4-byte aligned.
                rest = rest.get(length.next_multiple_of(4)..).unwrap_or_default();
            }
        }
    }
}

/// The parent of the filters on clsact's `direction`.
fn clsact_parent(direction: Direction) -> TcHandle {
    TcHandle {
        major: TcHandle::CLSACT.major,
        minor: match direction {
            Direction::Ingress => TcHandle::MIN_INGRESS,
            Direction::Egress => TcHandle::MIN_EGRESS,
        },
    }
}

fn tc_message(index: u32) -> TcMessage {
    // Interface indexes are positive i32 in the kernel.
    TcMessage::with_index(index as i32)
}

#[cfg(test)]
mod tests {
    use dnsloop_shared::names::{EGRESS_PROGRAM, INGRESS_PROGRAM};

    use super::*;

    /// A filter as the kernel dumps it: `options` under kind `bpf`, priority 49152 for all
    /// protocols (`ETH_P_ALL` in network order).
    fn dumped(options: Vec<TcOption>) -> TcMessage {
        let mut message = tc_message(4);
        message.header.info = 49152 << 16 | u32::from(0x0003u16.to_be());
        message.header.handle = TcHandle { major: 0, minor: 1 };
        message.attributes = vec![
            TcAttribute::Kind("bpf".to_owned()),
            TcAttribute::Options(options),
        ];
        message
    }

    #[test]
    fn a_dumped_bpf_filter_gives_its_program_and_what_names_it_for_removal() {
        let message = dumped(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgId(2803)),
            TcOption::Bpf(TcFilterBpfOption::ProgName(INGRESS_PROGRAM.to_owned())),
        ]);
        let filter = BpfFilter::of(&message).expect("a BPF filter");
        assert_eq!(filter.name, INGRESS_PROGRAM);
        assert_eq!(filter.program_id, 2803);
        assert_eq!(filter.priority, 49152);
        assert_eq!(
            u32::from(filter.priority) << 16 | u32::from(filter.protocol),
            message.header.info
        );
        assert_eq!(filter.handle, message.header.handle);
    }

    #[test]
    fn a_filter_chain_without_a_program_is_no_bpf_filter() {
        assert_eq!(BpfFilter::of(&dumped(Vec::new())), None);
        let mut other_kind = dumped(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgId(7)),
            TcOption::Bpf(TcFilterBpfOption::ProgName(EGRESS_PROGRAM.to_owned())),
        ]);
        other_kind.attributes[0] = TcAttribute::Kind("u32".to_owned());
        assert_eq!(BpfFilter::of(&other_kind), None);
    }
}
