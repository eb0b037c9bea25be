//! The query table: where each query in flight went, so that its reply can be checked where it
//! reaches the client, before the client's socket judges it.
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns};
use dnsloop_ebpf::{
    event::{QueryKey, QueryState},
    parse::Segment,
};

use super::maps::QUERIES;

/// A client resending a query waits at least this long for the answer first (stub resolvers
/// wait a second or more); sooner, it is the same query met again.
const RETRY_AFTER_NS: u64 = 200_000_000;

/// Remembers a query at its first sighting, the one closest to its client. Later hops of the
/// same query (same client, port and id) leave the entry alone: after DNAT their destination is
/// no longer the one the client chose.
///
/// Returns the first sending when this is the client sending it again, unanswered, from where it
/// first did: stub resolvers (glibc) retry on the same socket with the same ID.
#[inline(always)]
pub fn remember(segment: &Segment, id: u16, ifindex: u32, direction: u8) -> Option<QueryState> {
    let key = key(segment.src, segment.sport, id, segment);
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(first) = QUERIES.get_ptr_mut(&key) {
        // SAFETY: a value of our map; a concurrent update can only skew the flag.
        let first = unsafe { &mut *first };
        let resent = first.ifindex == ifindex
            && first.direction == direction
            && now.saturating_sub(first.first_ns) >= RETRY_AFTER_NS;
        if !resent {
            return None;
        }
        first.retried = 1;
        return Some(*first);
    }
    let state = QueryState {
        first_ns: now,
        server: segment.dst,
        server_port: segment.dport,
        direction,
        retried: 0,
        ifindex,
    };
    let _ = QUERIES.insert(&key, &state, BPF_NOEXIST.into());
    None
}

/// The query a reply answers, if the reply is now reaching that query's client: at the interface
/// where the query was first seen, in the other direction. The entry is then done with.
#[inline(always)]
pub fn answered_at_client(
    segment: &Segment,
    id: u16,
    ifindex: u32,
    direction: u8,
) -> Option<QueryState> {
    let key = key(segment.dst, segment.dport, id, segment);
    // SAFETY: a plain-data value of our map, copied out at once.
    let query = *unsafe { QUERIES.get(&key) }?;
    if query.ifindex != ifindex || query.direction == direction {
        return None;
    }
    let _ = QUERIES.remove(&key);
    Some(query)
}

/// The key of the query sent by `client`:`client_port` with `id` over `segment`'s transport.
#[inline(always)]
fn key(client: [u8; 16], client_port: u16, id: u16, segment: &Segment) -> QueryKey {
    QueryKey {
        client,
        client_port,
        id,
        transport: segment.transport as u8,
        _pad: [0; 3],
    }
}

/// Whether the reply in `segment` comes from somewhere other than where `query` was sent.
#[inline(always)]
pub fn from_elsewhere(segment: &Segment, query: &QueryState) -> bool {
    segment.src != query.server || segment.sport != query.server_port
}
