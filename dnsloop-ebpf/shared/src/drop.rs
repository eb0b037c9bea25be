//! Packets the kernel dropped: where the drop program finds what it reads, and the record it
//! streams for a dropped DNS packet.
//!
//! The drop program runs on the `kfree_skb` tracepoint (BTF-typed), whose arguments are the socket
//! buffer, the kernel address that freed it and the drop reason (Linux 5.17 added the reason).
//! The `sk_buff`, `net_device` and `net` structures it reads move between kernels, and Rust BPF
//! has no CO-RE relocations: userspace works their offsets out from the running kernel's BTF
//! and patches them in as a [`DropLayout`].

/// Bytes of a dropped packet a [`DropRecord`] carries, from its IP header: a query, and the
/// question of any answer.
pub const DROP_SNAP_MAX: usize = 512;

/// Slots of the per-reason drop counters: one per reason below the last, which counts every
/// reason from it on (subsystems' reasons, numbered from 65536, among them).
pub const DROP_REASON_SLOTS: u32 = 256;

/// The counter slot of drop reason `reason`.
pub const fn reason_slot(reason: u32) -> u32 {
    if reason < DROP_REASON_SLOTS - 1 {
        reason
    } else {
        DROP_REASON_SLOTS - 1
    }
}

/// A [`DropRecord::reason`] where the tracepoint gives none (Linux < 5.17).
pub const UNKNOWN_REASON: u32 = u32::MAX;

/// The tracepoint's arguments (its `TP_PROTO`), in order.
pub const SKB_ARGUMENT: usize = 0;
pub const LOCATION_ARGUMENT: usize = 1;
pub const REASON_ARGUMENT: usize = 2;

/// Byte offsets the drop program reads at, in the running kernel. All zero: the kernel lacks
/// what is needed, and the program returns at once.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropLayout {
    /// Of `struct sk_buff`: `protocol` (big-endian u16), `head` (a pointer),
    /// `network_header` (u16, from `head`), `tail` (u32, from `head`), `dev` (a pointer).
    pub skb_protocol: u16,
    pub skb_head: u16,
    pub skb_network_header: u16,
    pub skb_tail: u16,
    pub skb_dev: u16,
    /// Of `struct net_device`: `ifindex` (i32) and `nd_net.net` (a pointer).
    pub dev_ifindex: u16,
    pub dev_net: u16,
    /// Of `struct net`: `net_cookie` (u64), or 0 where namespaces go by their inode number
    /// (Linux < 5.14, see `namespaces`): then `ns.inum` (u32).
    pub net_cookie: u16,
    pub net_inum: u16,
}

impl DropLayout {
    /// No layout: drops are not watched.
    pub const NONE: Self = Self {
        skb_protocol: 0,
        skb_head: 0,
        skb_network_header: 0,
        skb_tail: 0,
        skb_dev: 0,
        dev_ifindex: 0,
        dev_net: 0,
        net_cookie: 0,
        net_inum: 0,
    };

    /// Whether userspace gave a layout (`head` is never a socket buffer's first field).
    pub const fn is_set(&self) -> bool {
        self.skb_head != 0
    }
}

/// One dropped DNS packet, streamed through the drop ring as its first
/// [`DROP_RECORD_HEADER_LEN`] bytes and then its `captured_len` bytes of packet, no more: a
/// dropped query of 100 bytes takes 140 bytes of ring rather than 552, so a burst of drops (a
/// server's socket buffer overflowing) finds four times the room.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DropRecord {
    /// `bpf_ktime_get_ns`: CLOCK_MONOTONIC.
    pub ts_ns: u64,
    /// The kernel text address that dropped it (the tracepoint's `location`).
    pub location: u64,
    /// The network namespace of the device it was on (its cookie or inode number, as
    /// `DropLayout` says), 0 when it had none (or none readable).
    pub netns_cookie: u64,
    /// That device, 0 for none.
    pub ifindex: u32,
    /// The kernel's `enum skb_drop_reason`, whose numbering is the running kernel's own, or
    /// [`UNKNOWN_REASON`].
    pub reason: u32,
    /// Bytes from the IP header to the end of the packet's linear data.
    pub linear_len: u32,
    /// Bytes of `bytes` that hold packet data.
    pub captured_len: u16,
    /// The packet's ethertype (host order): IPv4 or IPv6.
    pub protocol: u16,
    /// From the IP header on.
    pub bytes: [u8; DROP_SNAP_MAX],
}

impl DropRecord {
    pub const EMPTY: Self = Self {
        ts_ns: 0,
        location: 0,
        netns_cookie: 0,
        ifindex: 0,
        reason: 0,
        linear_len: 0,
        captured_len: 0,
        protocol: 0,
        bytes: [0; DROP_SNAP_MAX],
    };
}

/// The bytes of a [`DropRecord`] before its packet's.
pub const DROP_RECORD_HEADER_LEN: usize = core::mem::offset_of!(DropRecord, bytes);

#[cfg(feature = "user")]
crate::pod!(DropLayout, DropRecord);

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn the_drop_types_have_no_implicit_padding() {
        assert_eq!(size_of::<DropLayout>(), 9 * 2);
        assert_eq!(
            size_of::<DropRecord>(),
            8 * 3 + 4 * 3 + 2 * 2 + DROP_SNAP_MAX
        );
        // A ring item's packet starts 8-byte aligned, as its header does.
        assert_eq!(DROP_RECORD_HEADER_LEN, 40);
    }

    #[test]
    fn reasons_past_the_slots_share_the_last() {
        assert_eq!(reason_slot(12), 12);
        assert_eq!(reason_slot(DROP_REASON_SLOTS - 2), DROP_REASON_SLOTS - 2);
        assert_eq!(reason_slot(DROP_REASON_SLOTS - 1), DROP_REASON_SLOTS - 1);
        assert_eq!(reason_slot(0x1_0003), DROP_REASON_SLOTS - 1);
    }

    #[test]
    fn a_layout_without_offsets_is_none() {
        assert!(!DropLayout::NONE.is_set());
    }
}
