//! The kernel programs' ring buffer as a packet source.
use std::{
    io,
    time::{Duration, SystemTime},
};

use aya::maps::{MapData, RingBuf};
use bytes::BytesMut;
use dnsloop_shared::{
    parse::Transport,
    point::Direction,
    query::QueryState,
    question::Sighting,
    record::{RingItem, StreamReason},
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

/// The packet a ring item holds (see `RingItem`), its bytes copied into `chunk`; `None` for an
/// item that is none.
fn raw_packet(item: &[u8], clock: &MonotonicClock, chunk: &mut BytesMut) -> Option<RawPacket> {
    let RingItem {
        context,
        record,
        bytes,
    } = RingItem::read(item)?;
    let reason = StreamReason::from_u8(record.reason);
    Some(RawPacket {
        ts: clock.wall_time(record.ts_ns),
        seen: Seen::from_kernel(
            record.netns_cookie,
            record.ifindex,
            record.direction,
            record.via_gateway != 0,
        )?,
        link_layer: link_layer(record.link_layer)?,
        bytes: copy_into(chunk, bytes),
        matched_query: context
            .as_ref()
            .filter(|_| reason.is_some_and(StreamReason::carries_query))
            .and_then(|context| matched_query(&context.matched_query, clock)),
        priors: context
            .iter()
            .flat_map(|context| &context.priors)
            .filter_map(|prior| prior_sighting(prior, clock))
            .collect(),
        recorder_only: reason == Some(StreamReason::Recorded),
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
/// source, a truncated answer) or repeats (a retry), if `query` is one.
fn matched_query(query: &QueryState, clock: &MonotonicClock) -> Option<MatchedQuery> {
    if query.first_ns == 0 {
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
    use dnsloop_shared::{
        parse::IpFamily,
        record::{PacketRecord, RecordContext, ITEM_CONTEXT, ITEM_PACKET},
    };

    use super::*;

    fn record() -> PacketRecord {
        // SAFETY: plain data, valid whatever its bytes.
        let mut record: PacketRecord = unsafe { std::mem::zeroed() };
        record.item = ITEM_PACKET;
        record.ts_ns = 1_000_000;
        record.ifindex = 7;
        record.direction = Direction::Egress as u8;
        record.captured_len = 3;
        record
    }

    /// The bytes of `value`, plain data.
    fn bytes_of<T>(value: &T) -> &[u8] {
        // SAFETY: plain data, read as its bytes.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
    }

    /// The ring item of `record`, followed by `packet`.
    fn item(record: &PacketRecord, packet: &[u8]) -> Vec<u8> {
        [bytes_of(record), packet].concat()
    }

    #[test]
    fn a_record_with_context_carries_its_query_where_its_reason_has_one_and_its_priors() {
        let clock = MonotonicClock::anchored_now();
        let mut chunk = BytesMut::new();
        // SAFETY: plain data, valid whatever its bytes.
        let mut context: RecordContext = unsafe { std::mem::zeroed() };
        context.item = ITEM_CONTEXT;
        context.matched_query.first_ns = 500_000;
        context.matched_query.server = [10, 96, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        context.matched_query.server_port = 53;
        context.priors[1].family = IpFamily::V4 as u8;
        context.priors[1].ts_ns = 400_000;
        context.priors[1].ifindex = 3;
        for (reason, carries_query) in [
            (StreamReason::UnexpectedSource, true),
            (StreamReason::HotQuestion, false),
        ] {
            let mut record = record();
            record.reason = reason as u8;
            let item = [bytes_of(&context), &item(&record, b"abc")].concat();
            let packet = raw_packet(&item, &clock, &mut chunk).expect("a record with context");
            assert_eq!(&packet.bytes[..], b"abc");
            assert_eq!(packet.matched_query.is_some(), carries_query, "{reason:?}");
            let [prior] = packet.priors.as_slice() else {
                panic!("one prior: {:?}", packet.priors);
            };
            assert_eq!(prior.at, clock.wall_time(400_000));
            assert_eq!(prior.seen.interface.ifindex, 3);
        }
        let plain = raw_packet(&item(&record(), b"abc"), &clock, &mut chunk).expect("a record");
        assert!(plain.matched_query.is_none() && plain.priors.is_empty());
        let mut unknown = item(&record(), b"abc");
        unknown[0] = 9;
        assert!(
            raw_packet(&unknown, &clock, &mut chunk).is_none(),
            "no known kind"
        );
        let cut = [bytes_of(&context), &[ITEM_PACKET][..]].concat();
        assert!(
            raw_packet(&cut, &clock, &mut chunk).is_none(),
            "a context without its record"
        );
    }

    #[test]
    fn a_record_reads_the_same_aligned_and_unaligned_and_a_cut_one_not_at_all() {
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
