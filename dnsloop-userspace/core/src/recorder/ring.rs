//! The recorder's memory: the latest packets, as many as a byte budget holds.
use std::{collections::VecDeque, sync::Arc, time::SystemTime};

use crate::{points::LinkDescription, source::RawPacket};

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

/// The latest packets, oldest first, within a byte budget: past it, the oldest are dropped.
pub(super) struct Ring {
    packets: VecDeque<Kept>,
    bytes: u64,
    budget: u64,
    /// The time of the newest packet dropped, if any was.
    newest_dropped: Option<SystemTime>,
}

impl Ring {
    pub fn new(budget: u64) -> Self {
        Self {
            packets: VecDeque::new(),
            bytes: 0,
            budget,
            newest_dropped: None,
        }
    }

    pub fn push(&mut self, kept: Kept) {
        self.bytes += cost(&kept);
        self.packets.push_back(kept);
        while self.bytes > self.budget {
            let Some(oldest) = self.packets.pop_front() else {
                break;
            };
            self.bytes -= cost(&oldest);
            self.newest_dropped = Some(
                self.newest_dropped
                    .map_or(oldest.packet.ts, |newest| newest.max(oldest.packet.ts)),
            );
        }
    }

    /// The packets seen from `from` to `until`, in the order they came.
    pub fn between(&self, from: SystemTime, until: SystemTime) -> Vec<Kept> {
        self.packets
            .iter()
            .filter(|kept| (from..=until).contains(&kept.packet.ts))
            .cloned()
            .collect()
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

fn cost(kept: &Kept) -> u64 {
    kept.packet.bytes.len() as u64 + PACKET_OVERHEAD
}
