//! The recorder's memory: the latest packets, as many as a byte budget holds, in segments that
//! a bundle being written shares rather than copies.
use std::{collections::VecDeque, sync::Arc, time::SystemTime};

use crate::{points::LinkDescription, source::RawPacket};

/// Packets a segment holds: handing a bundle's packets to the writer clones one `Arc` per
/// segment and copies the unsealed one, at most this many packets, on the trace's thread.
const SEGMENT_PACKETS: usize = 1024;

/// An interface as the packet file will record it, named when its packets were seen: it may be
/// gone by the time they are written.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct NamedInterface {
    pub name: String,
    pub description: LinkDescription,
}

/// A packet kept, with its interface; `None`: it had gone away before it could be named.
#[derive(Clone, Debug)]
pub(super) struct Kept {
    pub packet: RawPacket,
    pub interface: Option<Arc<NamedInterface>>,
}

/// What one kept packet costs besides its bytes: the record itself (its bytes are shared with
/// the rest of their batch's, in the chunks the ring buffer source copies them into).
pub const PACKET_OVERHEAD: u64 = std::mem::size_of::<Kept>() as u64;

/// Packets in the order they came, shared with the bundles being written.
pub(super) type Segment = Arc<Vec<Kept>>;

/// The latest packets, oldest first, within a byte budget: past it, the oldest segments are
/// dropped. A bundle being written keeps the segments it was handed until it is written.
pub(super) struct Ring {
    /// Full segments and their bytes, oldest first.
    sealed: VecDeque<(Segment, u64)>,
    current: Vec<Kept>,
    current_bytes: u64,
    bytes: u64,
    budget: u64,
    segment_packets: usize,
    /// The time of the newest packet kept, if any was.
    newest: Option<SystemTime>,
    /// The time of the newest packet dropped, if any was.
    newest_dropped: Option<SystemTime>,
}

impl Ring {
    pub fn new(budget: u64) -> Self {
        Self::with_segments_of(budget, SEGMENT_PACKETS)
    }

    fn with_segments_of(budget: u64, segment_packets: usize) -> Self {
        Self {
            sealed: VecDeque::new(),
            current: Vec::with_capacity(segment_packets),
            current_bytes: 0,
            bytes: 0,
            budget,
            segment_packets,
            newest: None,
            newest_dropped: None,
        }
    }

    pub fn push(&mut self, kept: Kept) {
        let cost = kept.packet.bytes.len() as u64 + PACKET_OVERHEAD;
        self.newest = self.newest.max(Some(kept.packet.ts));
        self.bytes += cost;
        self.current_bytes += cost;
        self.current.push(kept);
        if self.current.len() >= self.segment_packets {
            self.seal();
        }
        while self.bytes > self.budget {
            if self.sealed.is_empty() {
                self.seal();
            }
            let Some((oldest, bytes)) = self.sealed.pop_front() else {
                break;
            };
            self.bytes -= bytes;
            let newest = oldest.iter().map(|kept| kept.packet.ts).max();
            self.newest_dropped = self.newest_dropped.max(newest);
        }
    }

    fn seal(&mut self) {
        let segment =
            std::mem::replace(&mut self.current, Vec::with_capacity(self.segment_packets));
        self.sealed
            .push_back((Arc::new(segment), std::mem::take(&mut self.current_bytes)));
    }

    /// The segments that may hold packets seen since `from`; their packets are to be taken
    /// by time, as they may hold older ones too.
    pub fn since(&self, from: SystemTime) -> Vec<Segment> {
        let mut segments: Vec<Segment> = self
            .sealed
            .iter()
            .filter(|(segment, _)| segment.iter().any(|kept| kept.packet.ts >= from))
            .map(|(segment, _)| Arc::clone(segment))
            .collect();
        segments.push(Arc::new(self.current.clone()));
        segments
    }

    /// The time of the newest packet kept.
    pub fn newest(&self) -> Option<SystemTime> {
        self.newest
    }

    /// Whether every packet since `from` is still held.
    pub fn holds_all_since(&self, from: SystemTime) -> bool {
        self.newest_dropped.is_none_or(|dropped| dropped < from)
    }

    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The packets of `segments` seen from `from` to `until`, in the order they came.
pub(super) fn between(
    segments: &[Segment],
    from: SystemTime,
    until: SystemTime,
) -> impl Iterator<Item = &Kept> {
    segments
        .iter()
        .flat_map(|segment| segment.iter())
        .filter(move |kept| (from..=until).contains(&kept.packet.ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{observations::ms, samples::a_query};

    fn at(ms_at: u64) -> Kept {
        Kept {
            packet: a_query(ms(ms_at), "10.244.0.2:41234", "10.96.0.10:53", 7),
            interface: None,
        }
    }

    #[test]
    fn memory_is_bounded_and_says_when_it_lacks_the_oldest_packets() {
        let one = at(0).packet.bytes.len() as u64 + PACKET_OVERHEAD;
        // Segments of 2 packets, room for 5 packets.
        let mut ring = Ring::with_segments_of(5 * one, 2);
        for n in 0..10 {
            ring.push(at(n * 100));
            assert!(ring.bytes() <= 5 * one);
        }
        let segments = ring.since(ms(0));
        let times: Vec<SystemTime> = between(&segments, ms(0), ms(10_000))
            .map(|kept| kept.packet.ts)
            .collect();
        assert_eq!(times, [ms(600), ms(700), ms(800), ms(900)]);
        assert!(!ring.holds_all_since(ms(0)));
        assert!(!ring.holds_all_since(ms(500)));
        assert!(ring.holds_all_since(ms(501)));
    }

    #[test]
    fn a_bundle_is_handed_the_segments_of_its_time_and_takes_its_packets_by_time() {
        let mut ring = Ring::with_segments_of(u64::MAX, 3);
        for n in 0..10 {
            ring.push(at(n * 100));
        }
        // 0-200 is left out whole; 300-500 is shared, though 300 is not taken.
        let segments = ring.since(ms(350));
        assert_eq!(segments.len(), 3, "two sealed, and the one filling");
        let times: Vec<SystemTime> = between(&segments, ms(350), ms(800))
            .map(|kept| kept.packet.ts)
            .collect();
        assert_eq!(times, [ms(400), ms(500), ms(600), ms(700), ms(800)]);
    }
}
