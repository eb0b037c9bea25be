//! The server table: the answers each server gave, as its clients addressed it.

/// A server as its clients addressed it (before any DNAT), for its answer statistics.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServerKey {
    /// IPv4 in the first 4 bytes.
    pub address: [u8; 16],
    pub port: u16,
    /// `parse::IpFamily as u8`.
    pub family: u8,
    pub _pad: [u8; 1],
}

/// Answers a server gave, as they reached their clients: counted by the kernel for every query
/// it matched, streamed or not. Shared by all CPUs and updated with atomic adds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerStats {
    pub answered: u64,
    /// The slowest answer; updated without a lock, so a near-simultaneous one may be missed.
    pub max_ns: u64,
    /// Answers with TC set: the client has to ask again over TCP for the whole answer.
    pub truncated: u64,
    /// Answers per 4-bit header rcode.
    pub rcodes: [u64; 16],
    /// Answers per latency bucket (see `latency_buckets::bucket`), from the query's first sighting.
    pub latency: [u64; crate::latency_buckets::LATENCY_BUCKETS],
}

impl ServerStats {
    pub const ZERO: Self = Self {
        answered: 0,
        max_ns: 0,
        truncated: 0,
        rcodes: [0; 16],
        latency: [0; crate::latency_buckets::LATENCY_BUCKETS],
    };
}

#[cfg(feature = "user")]
crate::pod!(ServerKey, ServerStats);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn server_types_have_no_implicit_padding() {
        assert_eq!(size_of::<ServerKey>(), 20);
        assert_eq!(
            size_of::<ServerStats>(),
            8 * (3 + 16 + crate::latency_buckets::LATENCY_BUCKETS)
        );
    }
}
