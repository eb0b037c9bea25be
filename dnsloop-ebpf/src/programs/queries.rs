//! The query table: where each query in flight went, so that its reply can be checked where it
//! reaches the client, before the client's socket judges it.
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns};
use dnsloop_ebpf::{
    event::{QueryKey, QueryState},
    parse::Segment,
};

use super::maps::QUERIES;

/// Remembers a query at its first sighting, the one closest to its client. Later hops of the
/// same query (same client, port and id) leave the entry alone: after DNAT their destination is
/// no longer the one the client chose.
#[inline(always)]
pub fn remember(segment: &Segment, id: u16, ifindex: u32, direction: u8) {
    let key = key(segment.src, segment.sport, id, segment);
    let state = QueryState {
        // SAFETY: bpf_ktime_get_ns has no preconditions.
        first_ns: unsafe { bpf_ktime_get_ns() },
        server: segment.dst,
        server_port: segment.dport,
        direction,
        _pad: 0,
        ifindex,
    };
    let _ = QUERIES.insert(&key, &state, BPF_NOEXIST.into());
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
