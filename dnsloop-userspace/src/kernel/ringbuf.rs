//! The kernel programs' ring buffer as a packet source.
use std::{
    borrow::Cow,
    io,
    time::{Duration, SystemTime},
};

use aya::maps::{MapData, RingBuf};
use bytes::BytesMut;
use dnsloop_shared::{
    parse::Transport,
    point::Direction,
    question::Sighting,
    record::{PacketRecord, StreamReason, PACKET_SNAP_MAX},
};
use tokio::io::unix::AsyncFd;

use dnsloop_core::{
    points::Seen,
    source::{ip_family, link_layer, socket_addr, MatchedQuery, PriorSighting, RawPacket},
};

use super::clock::MonotonicClock;

/// The programs wake us only once plenty is waiting (see the kernel's `WAKEUP_BYTES`); this poll
/// bounds how long a lone record can wait.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Packets' bytes are copied out of the ring into shared chunks of this size, each packet's
/// `Bytes` a slice of one: one allocation per few hundred packets rather than one per packet.
const BYTES_CHUNK: usize = 64 * 1024;

pub struct RingBufSource {
    ring: AsyncFd<RingBuf<MapData>>,
    clock: MonotonicClock,
    poll: tokio::time::Interval,
    /// Where the next packets' bytes are copied to (see `BYTES_CHUNK`).
    chunk: BytesMut,
    /// Records whose bytes made no sense (a version mismatch between the programs and us).
    pub undecodable_records: u64,
}

impl RingBufSource {
    pub fn new(ring: RingBuf<MapData>, clock: MonotonicClock) -> io::Result<Self> {
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ok(Self {
            // SAFETY: the ring buffer owns its map descriptor, which stays open and unchanged
            // for as long as the AsyncFd owns the ring.
            ring: unsafe { AsyncFd::register(ring)? },
            clock,
            poll,
            chunk: BytesMut::new(),
            undecodable_records: 0,
        })
    }

    /// Waits until records may be available, then appends every available one to `out`.
    pub async fn next_batch(&mut self, out: &mut Vec<RawPacket>) -> io::Result<()> {
        tokio::select! {
            guard = self.ring.readable_mut() => guard?.clear_ready(),
            _ = self.poll.tick() => {}
        }
        self.drain(out);
        Ok(())
    }

    /// A time no record still to come can be older than, on the records' clock: the programs
    /// wake us late by up to one poll interval, so now minus that (and a margin for the batch
    /// being handled).
    pub fn watermark(&self) -> SystemTime {
        self.clock.now() - 2 * POLL_INTERVAL
    }

    /// Appends every record already in the ring to `out`, without waiting.
    pub fn drain(&mut self, out: &mut Vec<RawPacket>) {
        let ring = self.ring.get_mut();
        while let Some(item) = ring.next() {
            match raw_packet(&item, &self.clock, &mut self.chunk) {
                Some(packet) => out.push(packet),
                None => self.undecodable_records += 1,
            }
        }
    }
}

/// The packet a ring item holds (a `PacketRecord` and the packet's bytes after it), its bytes
/// copied into `chunk`; `None` for an item shorter than what its record says it holds.
fn raw_packet(item: &[u8], clock: &MonotonicClock, chunk: &mut BytesMut) -> Option<RawPacket> {
    let (head, packet) = item.split_at_checked(size_of::<PacketRecord>())?;
    let start = head.as_ptr().cast::<PacketRecord>();
    // Read in place when aligned, as the kernel aligns ring records to 8 bytes.
    let record: Cow<'_, PacketRecord> = if start.is_aligned() {
        // SAFETY: `head` is a whole PacketRecord, aligned; it is plain data, valid whatever its
        // bytes, and the ring keeps the item until after this call.
        Cow::Borrowed(unsafe { &*start })
    } else {
        // SAFETY: as above, read unaligned into a copy.
        Cow::Owned(unsafe { std::ptr::read_unaligned(start) })
    };
    let captured = packet.get(..usize::from(record.captured_len).min(PACKET_SNAP_MAX))?;
    Some(RawPacket {
        ts: clock.wall_time(record.ts_ns),
        seen: Seen::from_kernel(
            record.netns_cookie,
            record.ifindex,
            record.direction,
            record.via_gateway != 0,
        )?,
        link_layer: link_layer(record.link_layer)?,
        bytes: copy_into(chunk, captured),
        matched_query: matched_query(&record, clock),
        priors: record
            .priors
            .iter()
            .filter_map(|prior| prior_sighting(prior, clock))
            .collect(),
        recorder_only: StreamReason::from_u8(record.reason) == Some(StreamReason::Recorded),
    })
}

/// `bytes`, copied to the end of `chunk`, as a `Bytes` of their own that shares its allocation.
/// A chunk without room for them is left to the packets that hold parts of it, and a new one
/// started.
fn copy_into(chunk: &mut BytesMut, bytes: &[u8]) -> bytes::Bytes {
    if chunk.capacity() < bytes.len() {
        *chunk = BytesMut::with_capacity(BYTES_CHUNK.max(bytes.len()));
    }
    chunk.extend_from_slice(bytes);
    chunk.split().freeze()
}

/// The first sending of the query the record's packet answers (a reply from an unexpected
/// source, a truncated answer) or repeats (a retry), when the record carries one.
fn matched_query(record: &PacketRecord, clock: &MonotonicClock) -> Option<MatchedQuery> {
    let carries_one = matches!(
        StreamReason::from_u8(record.reason),
        Some(StreamReason::UnexpectedSource | StreamReason::Retried | StreamReason::Truncated)
    );
    let query = &record.matched_query;
    if !carries_one || query.first_ns == 0 {
        return None;
    }
    Some(MatchedQuery {
        at: clock.wall_time(query.first_ns),
        direction: Direction::from_u8(query.direction)?,
        via_gateway: query.via_gateway != 0,
        server: query.server,
        server_port: query.server_port,
    })
}

/// One of the sightings before the one that made its question hot, if the slot holds one.
fn prior_sighting(prior: &Sighting, clock: &MonotonicClock) -> Option<PriorSighting> {
    let family = ip_family(prior.family)?;
    Some(PriorSighting {
        at: clock.wall_time(prior.ts_ns),
        seen: Seen::from_kernel(
            prior.netns_cookie,
            prior.ifindex,
            prior.direction,
            prior.via_gateway != 0,
        )?,
        src: socket_addr(family, &prior.src, prior.sport),
        dst: socket_addr(family, &prior.dst, prior.dport),
        id: prior.id,
        tcp: prior.transport == Transport::Tcp as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> PacketRecord {
        // SAFETY: plain data, valid whatever its bytes.
        let mut record: PacketRecord = unsafe { std::mem::zeroed() };
        record.ts_ns = 1_000_000;
        record.ifindex = 7;
        record.direction = Direction::Egress as u8;
        record.captured_len = 3;
        record
    }

    /// The ring item of `record`, followed by `packet`.
    fn item(record: &PacketRecord, packet: &[u8]) -> Vec<u8> {
        // SAFETY: plain data, read as its bytes.
        let head = unsafe {
            std::slice::from_raw_parts(
                (record as *const PacketRecord).cast::<u8>(),
                size_of::<PacketRecord>(),
            )
        };
        [head, packet].concat()
    }

    #[test]
    fn a_record_reads_the_same_in_place_and_unaligned_and_a_cut_one_not_at_all() {
        let clock = MonotonicClock::anchored_now();
        let aligned = item(&record(), b"abc");
        let mut unaligned = vec![0u8; 1];
        unaligned.extend_from_slice(&aligned);
        let mut chunk = BytesMut::new();
        for item in [&aligned[..], &unaligned[1..]] {
            let packet = raw_packet(item, &clock, &mut chunk).expect("a whole record");
            assert_eq!(&packet.bytes[..], b"abc");
            assert_eq!(packet.seen.interface.ifindex, 7);
            assert_eq!(packet.seen.direction, Direction::Egress);
            assert_eq!(packet.ts, clock.wall_time(1_000_000));
        }
        assert!(
            raw_packet(&aligned[..aligned.len() - 1], &clock, &mut chunk).is_none(),
            "an item shorter than its record says"
        );
        assert!(raw_packet(
            &aligned[..size_of::<PacketRecord>() - 1],
            &clock,
            &mut chunk
        )
        .is_none());
    }

    #[test]
    fn a_packet_streamed_only_to_be_recorded_says_so() {
        let clock = MonotonicClock::anchored_now();
        let mut chunk = BytesMut::new();
        let mut recorded = record();
        recorded.reason = StreamReason::Recorded as u8;
        for (record, recorder_only) in [(record(), false), (recorded, true)] {
            let packet = raw_packet(&item(&record, b"abc"), &clock, &mut chunk).expect("a record");
            assert_eq!(packet.recorder_only, recorder_only);
        }
    }

    #[test]
    fn packets_copied_into_one_chunk_keep_their_own_bytes() {
        let mut chunk = BytesMut::with_capacity(8);
        let first = copy_into(&mut chunk, b"abc");
        let second = copy_into(&mut chunk, b"defg");
        // No room left for these: a new chunk, the old one still held by the first two.
        let third = copy_into(&mut chunk, b"hi");
        let large = copy_into(&mut chunk, &[7; 2 * BYTES_CHUNK]);
        let after = copy_into(&mut chunk, b"j");
        assert_eq!(&first[..], b"abc");
        assert_eq!(&second[..], b"defg");
        assert_eq!(&third[..], b"hi");
        assert_eq!(&large[..], &[7; 2 * BYTES_CHUNK][..]);
        assert_eq!(&after[..], b"j");
        assert!(chunk.is_empty());
    }
}
