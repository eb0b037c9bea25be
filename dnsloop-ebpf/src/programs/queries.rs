//! The query table: where each query in flight went, so that its reply can be checked and timed
//! where it reaches the client, before the client's socket judges it; and what it asked, so that
//! userspace can name it if it is never answered.
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::bindings::BPF_NOEXIST;
use dnsloop_shared::{
    counter::Counter,
    latency_buckets,
    parse::{DnsHeader, Question, Segment},
    query::{QueryEntry, QueryKey, QueryState, NAME_INLINE_MAX},
    server::{ServerKey, ServerStats},
};

use super::{
    counters,
    hook::{copy_into, Hook, HookBytes, LOOPBACK_IFINDEX},
    maps::{Moment, PacketScratch, LONG_NAMES, QUERIES, SERVERS, ZERO_SERVER_STATS},
};

/// A client resending a query waits at least this long for the answer first (stub resolvers
/// wait a second or more); sooner, it is the same query met again.
const RETRY_AFTER_NS: u64 = 200_000_000;

/// The helpers' "already there" error (`-EEXIST`), for an insert with `BPF_NOEXIST`.
const EEXIST: i32 = 17;

/// Offset of the question's name in a DNS message.
const NAME_OFFSET: usize = 12;

/// Remembers a query at its first sighting, the one closest to its client. Later hops of the
/// same query (same client, port and id) leave the entry alone: after DNAT their destination is
/// no longer the one the client chose.
///
/// Returns the first sending when this is the client sending it again, unanswered, from where it
/// first did: stub resolvers (glibc) retry on the same socket with the same ID. A query that is
/// `streamed` for a reason its answer must share is remembered as retried already.
#[inline(always)]
pub fn remember<H: Hook>(
    packet: &HookBytes<H>,
    message_offset: usize,
    question: &Question,
    id: u16,
    streamed: bool,
    scratch: &mut PacketScratch,
) -> Option<QueryState> {
    let segment = &scratch.segment;
    let key = key(segment.src, segment.sport, id, segment);
    let now = scratch.now_ns;
    // Seen a moment ago: the look then found the query or put it in, and either way this is a
    // later hop, where the entry stays as it is.
    if same_packet_further_on(&key, false, scratch) {
        return None;
    }
    note_lookup(&key, false, scratch);
    let segment = &scratch.segment;
    let entry = &mut scratch.new_query;
    entry.state = QueryState {
        first_ns: now,
        server: segment.dst,
        server_port: segment.dport,
        direction: scratch.direction,
        retried: u8::from(streamed),
        ifindex: scratch.ifindex,
        via_gateway: u32::from(scratch.via_gateway),
        _pad: 0,
    };
    entry.netns_cookie = scratch.netns_cookie;
    entry.qtype = question.qtype;
    entry.qclass = question.qclass;
    entry.family = segment.family as u8;
    // Straight from the packet, only the name's bytes: a helper call with a length bounded
    // for the verifier, where copying the name's whole room from the DNS buffer took 64 word
    // copies. (The parser read these bytes from the same offset, so they are there.)
    entry.name_len = question.name_len;
    let long = QueryEntry::name_is_long(question.name_len);
    let name_offset = message_offset + NAME_OFFSET;
    let name_len = usize::from(question.name_len);
    // The entry's room first, whatever the name's length, then a long name whole: as two
    // alternatives, LLVM merges the calls into one whose length the verifier cannot bound.
    copy_into(
        packet.0,
        name_offset,
        &mut entry.name,
        name_len.min(NAME_INLINE_MAX),
    )?;
    if long {
        copy_into(
            packet.0,
            name_offset,
            &mut scratch.new_long_name.wire,
            name_len,
        )?;
    }
    // Inserted first, looked up only if the query is there already: nearly every query is new
    // here (a later hop was met just before, on the same CPU), and the look would find nothing.
    // The entry is copied from the per-CPU scratch value: it is too big for the stack.
    match QUERIES.insert(&key, &scratch.new_query, BPF_NOEXIST.into()) {
        Ok(()) if long => {
            // Replacing whatever the key held: a name left by an entry taken out unseen would
            // otherwise stand for this one.
            if LONG_NAMES.insert(&key, &scratch.new_long_name, 0).is_err() {
                let _ = QUERIES.remove(&key);
                counters::bump(Counter::QueriesNotTracked);
            }
            None
        }
        Ok(()) => None,
        Err(error) if error == -EEXIST => resent(&key, scratch),
        // Full: counted, for the summary and the metrics to say which timeouts went unseen.
        Err(_) => {
            counters::bump(Counter::QueriesNotTracked);
            None
        }
    }
}

/// The query with `key` met again: its first sending if this is the client sending it again,
/// unanswered, from where it first did.
#[inline(always)]
fn resent(key: &QueryKey, scratch: &PacketScratch) -> Option<QueryState> {
    let first = QUERIES.get_ptr_mut(key)?;
    // SAFETY: a value of our map; a concurrent update can only skew the flag.
    let first = unsafe { &mut (*first).state };
    let resent = first.ifindex == scratch.ifindex
        && first.direction == scratch.direction
        && scratch.now_ns.saturating_sub(first.first_ns) >= RETRY_AFTER_NS;
    if !resent {
        return None;
    }
    first.retried = 1;
    Some(*first)
}

/// The query a reply answers, if the reply is now reaching that query's client: at the interface
/// where the query was first seen, in the other direction (on loopback, which is watched on
/// egress only, in the same one). The entry is then done with; an answer from where the query
/// went is counted in its server's statistics.
#[inline(always)]
pub fn answered_at_client(header: DnsHeader, scratch: &mut PacketScratch) -> Option<QueryState> {
    let segment = &scratch.segment;
    let key = key(segment.dst, segment.dport, header.id, segment);
    if !same_packet_further_on(&key, true, scratch) {
        note_lookup(&key, true, scratch);
        let last = &mut scratch.last_lookup;
        last.found = 0;
        let entry = QUERIES.get_ptr(&key)?;
        // SAFETY: a plain-data value of our map; what is needed is copied out at once.
        unsafe {
            last.query.copy_from(&(*entry).state);
            last.query_netns_cookie = (*entry).netns_cookie;
            last.family = (*entry).family;
            last.long_name = u8::from(QueryEntry::name_is_long((*entry).name_len));
        }
        last.found = 1;
    }
    let last = &scratch.last_lookup;
    if last.found == 0 {
        return None;
    }
    let (query, family, long_name) = (last.query, last.family, last.long_name);
    let loopback = scratch.ifindex == LOOPBACK_IFINDEX;
    let reaches_client = query.ifindex == scratch.ifindex
        && last.query_netns_cookie == scratch.netns_cookie
        && (query.direction != scratch.direction || loopback);
    if !reaches_client {
        return None;
    }
    let _ = QUERIES.remove(&key);
    if long_name != 0 {
        let _ = LONG_NAMES.remove(&key);
    }
    scratch.last_lookup.found = 0;
    if !from_elsewhere(&scratch.segment, &query) {
        count_answer(&query, family, header, scratch.now_ns);
    }
    Some(query)
}

/// Adds an answer to `query` to its server's statistics.
#[inline(always)]
fn count_answer(query: &QueryState, family: u8, header: DnsHeader, now_ns: u64) {
    let key = ServerKey {
        address: query.server,
        port: query.server_port,
        family,
        _pad: [0; 1],
    };
    let stats = match SERVERS.get_ptr_mut(&key) {
        Some(stats) => stats,
        None => {
            let Some(zero) = ZERO_SERVER_STATS.get_ptr(0) else {
                return;
            };
            // SAFETY: a plain-data value of our map; inserting copies it.
            let _ = SERVERS.insert(&key, unsafe { &*zero }, BPF_NOEXIST.into());
            match SERVERS.get_ptr_mut(&key) {
                Some(stats) => stats,
                None => return,
            }
        }
    };
    let waited_ns = now_ns.saturating_sub(query.first_ns);
    // SAFETY: a value of our map, shared with other CPUs: counts change only by atomic adds.
    let stats: &mut ServerStats = unsafe { &mut *stats };
    add(&mut stats.answered);
    if let Some(count) = stats.rcodes.get_mut(usize::from(header.rcode())) {
        add(count);
    }
    if header.tc() {
        add(&mut stats.truncated);
    }
    if let Some(count) = stats
        .latency
        .get_mut(latency_buckets::bucket(waited_ns / 1000))
    {
        add(count);
    }
    if waited_ns > stats.max_ns {
        stats.max_ns = waited_ns;
    }
}

#[inline(always)]
fn add(count: &mut u64) {
    // SAFETY: `count` is an aligned u64 in map memory; other CPUs only add to it atomically.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(count, 1) };
}

/// Whether this CPU's last look into the query table was for `key`, for the same kind of
/// packet, moments ago at another point: the same packet further on its way, for which
/// `scratch.last_lookup` still says what the table holds.
#[inline(always)]
fn same_packet_further_on(key: &QueryKey, reply: bool, scratch: &PacketScratch) -> bool {
    let last = &scratch.last_lookup;
    last.seen.just_before_elsewhere(scratch) && (last.reply != 0) == reply && last.key == *key
}

/// Notes in `scratch.last_lookup` that this packet looks up `key`; the caller records what it
/// finds.
#[inline(always)]
fn note_lookup(key: &QueryKey, reply: bool, scratch: &mut PacketScratch) {
    let seen = Moment::of(scratch);
    let last = &mut scratch.last_lookup;
    last.seen = seen;
    last.key = *key;
    last.reply = u8::from(reply);
}

/// The key of the query sent by `client`:`client_port` with `id` over `segment`'s transport.
#[inline(always)]
fn key(client: [u8; 16], client_port: u16, id: u16, segment: &Segment) -> QueryKey {
    QueryKey::new(client, client_port, id, segment.transport as u8)
}

/// Whether the reply in `segment` comes from somewhere other than where `query` was sent.
#[inline(always)]
pub fn from_elsewhere(segment: &Segment, query: &QueryState) -> bool {
    segment.src != query.server || segment.sport != query.server_port
}
