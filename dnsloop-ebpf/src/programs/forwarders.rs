//! The forwarder table: addresses that send DNS queries on behalf of others. A question asked
//! again with a new ID is a forward only when a forwarder asks it; a client's new query is not.
//!
//! An address is a forwarder once it has answered DNS (CoreDNS pods, upstreams), or when
//! userspace says so (the node's own addresses: node-local-dns listens on a link-local address
//! and forwards from the node's). Loopback always is: only local resolvers ask over it twice.
use aya_ebpf::bindings::BPF_NOEXIST;
use dnsloop_shared::{
    forwarder::ForwarderKey,
    parse::{IpFamily, Segment},
};

use super::maps::FORWARDERS;

/// Notes that the source of the response in `segment` serves DNS.
#[inline(always)]
pub fn note_responder(segment: &Segment) {
    let key = ForwarderKey {
        address: segment.src,
    };
    // SAFETY: a lookup in our map.
    if unsafe { FORWARDERS.get(&key) }.is_none() {
        let _ = FORWARDERS.insert(&key, &1, BPF_NOEXIST.into());
    }
}

/// Whether the query in `segment` comes from a forwarder.
#[inline(always)]
pub fn sent_by_forwarder(segment: &Segment) -> bool {
    let loopback = match segment.family {
        IpFamily::V4 => segment.src[0] == 127,
        IpFamily::V6 => segment.src == LOOPBACK_V6,
    };
    let key = ForwarderKey {
        address: segment.src,
    };
    // SAFETY: a lookup in our map.
    loopback || unsafe { FORWARDERS.get(&key) }.is_some()
}

const LOOPBACK_V6: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
