//! The programs' settings, which userspace patches into them at load time.

use crate::record::PACKET_SNAP_MAX;

/// Settings userspace patches into the programs at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramConfig {
    /// A question stays hot while sightings are less than this apart, and a forward not
    /// answered within it no longer waits for the question to come back. Longer than resolvers'
    /// retry intervals (unbound retries a forward after 3 s), so that a loop going round once per
    /// retry stays hot from one round to the next.
    pub hot_window_ns: u64,
    /// Bytes of each streamed packet to keep, at most [`PACKET_SNAP_MAX`].
    pub snap_len: u32,
    /// Non-zero: stream every DNS packet (`--packets`).
    pub stream_every_packet: u8,
    /// Non-zero: also stream every DNS packet no other reason streams, as
    /// [`StreamReason::Recorded`](crate::record::StreamReason::Recorded), for the flight recorder
    /// (`--record`). Nothing else changes: userspace analyses what it would without it.
    pub record_every_packet: u8,
    pub _pad: [u8; 2],
    /// Non-zero: the namespace cookie loopback packets are tagged with, on kernels whose TC
    /// programs cannot ask for it (`bpf_get_netns_cookie` came to TC in Linux 6.13); userspace
    /// then watches its own namespace's loopback alone. Zero: the programs ask the kernel.
    pub loopback_cookie: u64,
}

impl ProgramConfig {
    pub const DEFAULT: Self = Self {
        hot_window_ns: 5_000_000_000,
        snap_len: PACKET_SNAP_MAX as u32,
        stream_every_packet: 0,
        record_every_packet: 0,
        _pad: [0; 2],
        loopback_cookie: 0,
    };
}

#[cfg(feature = "user")]
crate::pod!(ProgramConfig);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layout is a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn the_config_has_no_implicit_padding() {
        assert_eq!(size_of::<ProgramConfig>(), 24);
    }
}
