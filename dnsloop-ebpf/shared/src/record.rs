//! The ring record: a packet the programs streamed to userspace, and why.

#[cfg(feature = "user")]
use core::mem::size_of;

use crate::{
    query::QueryState,
    question::{Sighting, PRIOR_SIGHTINGS},
};

/// Most bytes of one packet a [`PacketRecord`] is followed by (from the start of the frame): a
/// 1232-byte EDNS answer with its headers fits.
pub const PACKET_SNAP_MAX: usize = 2048;

/// Why the kernel streamed a packet to userspace. Everything else is only counted.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamReason {
    /// Every DNS packet was asked for (`trace --packets`, `capture`).
    EveryPacket = 0,
    /// A query for a question that was asked with another ID within the window: the question is
    /// being forwarded (or re-asked), which is what a loop is made of.
    HotQuestion = 1,
    /// A CoreDNS or dnsmasq loop probe.
    Probe = 2,
    /// A TCP segment whose last DNS message continues in the next segment.
    TcpSplit = 3,
    /// A reply reaching its client from another address than the query went to; the record's
    /// `matched_query` says where and when that query went.
    UnexpectedSource = 4,
    /// A query its client sent again (same socket, same ID) with no answer yet, with the first
    /// sending in `matched_query`; or the reply that finally answers such a query.
    Retried = 5,
    /// A malformed packet on a DNS port, as a sample: every one is counted by reason, at most
    /// one per CPU per `MALFORMED_SAMPLE_INTERVAL_NS` is streamed.
    Malformed = 6,
    /// For the flight recorder only (`--record`): a DNS packet no reason above streams. Userspace
    /// keeps it for the recording and does not analyse it, as a trace without `--record` never
    /// sees it.
    Recorded = 7,
    /// An answer with TC set reaching its client, with its query in `matched_query`; or that
    /// client's query for the same question over TCP, its retry, and the answer to it.
    Truncated = 8,
}

/// Malformed packets are streamed at most this often per CPU (every one is counted): enough to
/// show what they look like, never enough for a flood of junk to crowd out what matters.
pub const MALFORMED_SAMPLE_INTERVAL_NS: u64 = 100_000_000;

impl StreamReason {
    pub fn from_u8(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::EveryPacket),
            1 => Some(Self::HotQuestion),
            2 => Some(Self::Probe),
            3 => Some(Self::TcpSplit),
            4 => Some(Self::UnexpectedSource),
            5 => Some(Self::Retried),
            6 => Some(Self::Malformed),
            7 => Some(Self::Recorded),
            8 => Some(Self::Truncated),
            _ => None,
        }
    }

    /// Whether a record streamed for this reason carries the query its packet answers or
    /// repeats.
    #[inline(always)]
    pub fn carries_query(self) -> bool {
        matches!(
            self,
            Self::UnexpectedSource | Self::Retried | Self::Truncated
        )
    }
}

/// What a ring item starts with: its first byte.
pub const ITEM_PACKET: u8 = 1;
pub const ITEM_CONTEXT: u8 = 2;

/// One packet streamed through the ring buffer: where and when it was seen, and why. In the ring
/// it is followed by the packet's first `captured_len` bytes from the start of the frame, exactly
/// as the program saw them, and nothing more: a record takes the room of its packet, not of the
/// longest one (a query of 100 bytes takes 132, where room for `PACKET_SNAP_MAX` takes 2080).
/// The few packets streamed with what the kernel knew of their query or question come with a
/// [`RecordContext`] before the record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRecord {
    /// [`ITEM_PACKET`]: an item starting with it holds no context.
    pub item: u8,
    pub direction: u8,
    /// A [`StreamReason`].
    pub reason: u8,
    /// The `parse::LinkLayer` of `bytes`.
    pub link_layer: u8,
    /// Non-zero on a bridge port when the frame went to or came from the bridge itself (see
    /// `point::via_gateway`).
    pub via_gateway: u8,
    pub _pad: u8,
    /// Bytes of the packet that follow the record.
    pub captured_len: u16,
    pub ifindex: u32,
    /// Length of the whole packet at the hook.
    pub wire_len: u32,
    /// `bpf_ktime_get_ns`: CLOCK_MONOTONIC.
    pub ts_ns: u64,
    /// As in [`ObservationPoint`](crate::point::ObservationPoint).
    pub netns_cookie: u64,
}

/// What the kernel knew of a streamed packet's query or question, in the ring item before its
/// [`PacketRecord`] when the record's reason carries a query (`UnexpectedSource`, `Retried`,
/// `Truncated`) or the packet made its question hot. Most records carry neither: apart, the
/// context costs them nothing, where inside every record it took 296 of its bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordContext {
    /// [`ITEM_CONTEXT`].
    pub item: u8,
    pub _pad: [u8; 7],
    /// The query the packet answers or repeats, for the reasons that carry one (its
    /// `first_ns` 0 when there is none).
    pub matched_query: QueryState,
    /// For the query that made its question hot: the sightings before it, oldest first, that
    /// were not streamed (`family` 0 in unused ones): the round of forwards that brought it back.
    pub priors: [Sighting; PRIOR_SIGHTINGS],
}

/// A ring item read back.
#[cfg(feature = "user")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingItem<'a> {
    pub context: Option<RecordContext>,
    pub record: PacketRecord,
    /// The packet's captured bytes.
    pub bytes: &'a [u8],
}

#[cfg(feature = "user")]
impl<'a> RingItem<'a> {
    /// `item` as the programs wrote it; `None` if it is not one (too short for what it says it
    /// holds, or of no known kind).
    pub fn read(item: &'a [u8]) -> Option<Self> {
        let (context, rest) = match *item.first()? {
            ITEM_PACKET => (None, item),
            ITEM_CONTEXT => {
                let (head, rest) = item.split_at_checked(size_of::<RecordContext>())?;
                // SAFETY: `head` holds a whole RecordContext, plain data valid whatever its
                // bytes; the ring's items are 8-byte aligned, read unaligned all the same.
                let context: RecordContext =
                    unsafe { head.as_ptr().cast::<RecordContext>().read_unaligned() };
                (Some(context), rest)
            }
            _ => return None,
        };
        let (head, packet) = rest.split_at_checked(size_of::<PacketRecord>())?;
        // SAFETY: as above, for a whole PacketRecord.
        let record: PacketRecord = unsafe { head.as_ptr().cast::<PacketRecord>().read_unaligned() };
        if record.item != ITEM_PACKET {
            return None;
        }
        let bytes = packet.get(..usize::from(record.captured_len).min(PACKET_SNAP_MAX))?;
        Some(Self {
            context,
            record,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layout is a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn the_record_has_no_implicit_padding() {
        assert_eq!(size_of::<PacketRecord>(), 32);
        assert_eq!(size_of::<RecordContext>(), 8 + 40 + 64 * PRIOR_SIGHTINGS);
        // What follows each starts aligned, as the ring's items do.
        assert_eq!(size_of::<PacketRecord>() % 8, 0);
        assert_eq!(size_of::<RecordContext>() % 8, 0);
    }

    #[test]
    fn stream_reasons_round_trip() {
        for reason in [
            StreamReason::EveryPacket,
            StreamReason::HotQuestion,
            StreamReason::Probe,
            StreamReason::TcpSplit,
            StreamReason::UnexpectedSource,
            StreamReason::Retried,
            StreamReason::Malformed,
            StreamReason::Recorded,
            StreamReason::Truncated,
        ] {
            assert_eq!(StreamReason::from_u8(reason as u8), Some(reason));
        }
        assert_eq!(StreamReason::from_u8(9), None);
    }
}
