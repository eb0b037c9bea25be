//! The query table: queries in flight, keyed by their client, with where they went and what
//! they asked.

use crate::stores;

/// A query in flight, as the query table keys it: by its client and id, which its reply
/// carries back (the server side may be rewritten by DNAT on the way).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueryKey {
    /// IPv4 in the first 4 bytes.
    pub client: [u8; 16],
    pub client_port: u16,
    pub id: u16,
    /// `parse::Transport as u8`.
    pub transport: u8,
    // Scalars, as in `ObservationPoint`.
    _pad1: u8,
    _pad2: u16,
}

impl QueryKey {
    #[inline(always)]
    pub const fn new(client: [u8; 16], client_port: u16, id: u16, transport: u8) -> Self {
        Self {
            client,
            client_port,
            id,
            transport,
            _pad1: 0,
            _pad2: 0,
        }
    }
}

/// Where and when a query was first seen, and where it was sent from there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryState {
    pub first_ns: u64,
    /// The query's destination at its first sighting, before any DNAT. IPv4 in the first 4 bytes.
    pub server: [u8; 16],
    pub server_port: u16,
    /// Direction of the first sighting; the reply reaches the client at the same interface in
    /// the other direction.
    pub direction: u8,
    /// Non-zero once the query was streamed for a reason its reply must be streamed for too:
    /// its client sent it again without an answer, or it is a client's retry over TCP of a
    /// truncated answer.
    pub retried: u8,
    pub ifindex: u32,
    /// Of the first sighting, as in [`PacketRecord`](crate::record::PacketRecord). A `u32`,
    /// with one `u32` of padding: seven bytes of padding to zero compile, in BPF, to a `memset`
    /// call (see [`stores`]).
    pub via_gateway: u32,
    pub _pad: u32,
}

impl QueryState {
    /// `*self = *other`, field by field (see [`stores`]).
    #[inline(always)]
    pub fn copy_from(&mut self, other: &Self) {
        self.first_ns = other.first_ns;
        stores::copy(&mut self.server, &other.server);
        self.server_port = other.server_port;
        self.direction = other.direction;
        self.retried = other.retried;
        self.ifindex = other.ifindex;
        self.via_gateway = other.via_gateway;
        self._pad = 0;
    }

    /// Clears every field in place (see [`stores`]).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.first_ns = 0;
        stores::fill(&mut self.server, 0);
        self.server_port = 0;
        self.direction = 0;
        self.retried = 0;
        self.ifindex = 0;
        // Volatile: LLVM would merge it with the stores before into a `memset` call.
        // SAFETY: a valid, exclusive reference.
        unsafe { core::ptr::write_volatile(&mut self.via_gateway, 0) };
    }
}

/// Room for a question's name in wire format: the longest legal name (255 bytes), rounded up to a
/// power of two so that a copy length can be bounded by a mask.
pub const NAME_WIRE_MAX: usize = 256;

/// Room for a name in the query entry itself. Nearly every name fits (a service's name in a
/// cluster, `kubernetes.default.svc.cluster.local`, takes 38 bytes; one with a search suffix
/// appended takes about 60); a longer one is held whole in `LongName`, keyed as the entry is.
/// Holding every name's full room in the entry made it 312 bytes instead of 120: the kernel
/// copies and touches each entry whole when a query is inserted, two to four times a query.
/// A power of two, as `NAME_WIRE_MAX`.
pub const NAME_INLINE_MAX: usize = 64;

/// A query in flight as the query table holds it: where it went, and what it asked, so that
/// userspace can report it by name if no answer ever reaches its client.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryEntry {
    pub state: QueryState,
    /// Of the first sighting, as in [`ObservationPoint`](crate::point::ObservationPoint).
    pub netns_cookie: u64,
    pub qtype: u16,
    pub qclass: u16,
    /// Length of the question's name (wire format, root label included). Longer than
    /// `NAME_INLINE_MAX`, the name is in the long-name table (see [`QueryEntry::name_is_long`]).
    pub name_len: u16,
    /// `parse::IpFamily as u8` of the key's and `state`'s addresses.
    pub family: u8,
    pub _pad: [u8; 1],
    /// The name, when it fits.
    pub name: [u8; NAME_INLINE_MAX],
}

impl QueryEntry {
    pub const EMPTY: Self = Self {
        state: QueryState {
            first_ns: 0,
            server: [0; 16],
            server_port: 0,
            direction: 0,
            retried: 0,
            ifindex: 0,
            via_gateway: 0,
            _pad: 0,
        },
        netns_cookie: 0,
        qtype: 0,
        qclass: 0,
        name_len: 0,
        family: 0,
        _pad: [0; 1],
        name: [0; NAME_INLINE_MAX],
    };

    /// Whether the name is too long for the entry, and held in the long-name table instead.
    #[inline(always)]
    pub const fn name_is_long(name_len: u16) -> bool {
        name_len as usize > NAME_INLINE_MAX
    }

    /// The question's name, if the entry holds it: `None` for a long one, or a length out of
    /// range.
    pub fn name(&self) -> Option<&[u8]> {
        self.name.get(..usize::from(self.name_len))
    }
}

/// The name of a query in flight too long for its [`QueryEntry`], in the long-name table under
/// the same key: inserted with the entry, removed with it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongName {
    pub wire: [u8; NAME_WIRE_MAX],
}

impl LongName {
    /// The name, if `len` is in range.
    pub fn name(&self, len: u16) -> Option<&[u8]> {
        self.wire.get(..usize::from(len))
    }
}

#[cfg(feature = "user")]
crate::pod!(QueryKey, QueryState, QueryEntry, LongName);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn query_types_have_no_implicit_padding() {
        assert_eq!(size_of::<QueryKey>(), 24);
        assert_eq!(size_of::<QueryState>(), 40);
        assert_eq!(size_of::<QueryEntry>(), 40 + 8 + 8 + NAME_INLINE_MAX);
        assert_eq!(size_of::<LongName>(), NAME_WIRE_MAX);
    }
}
