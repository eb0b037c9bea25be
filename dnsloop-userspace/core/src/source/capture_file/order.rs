//! A capture file's packets in timestamp order.
//!
//! tcpdump writes packets as the kernel hands them over, which is not quite in timestamp
//! order across CPUs, and files merged with `mergecap -a` or concatenated are further out. The
//! engine reorders only within its settle window (milliseconds), as live. A file can be read
//! twice, so its first reading measures how far out of order it is ([`super::placement::Survey`])
//! and the second holds each packet back that long.
use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    time::{Duration, SystemTime},
};

use super::CapturedPacket;

/// Holding more than this many packets releases the oldest early: a file concatenated from
/// captures hours apart is analysed in the order it holds rather than held whole in memory.
const MAX_HELD: usize = 1_000_000;

pub struct TimeOrder {
    window: Duration,
    held: BinaryHeap<Reverse<Held>>,
    newest: Option<SystemTime>,
    arrivals: u64,
}

/// A packet ordered by timestamp, then by its place in the file.
struct Held {
    ts: SystemTime,
    arrival: u64,
    packet: CapturedPacket,
}

impl TimeOrder {
    /// No packet is more than `window` behind one before it in the file.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            held: BinaryHeap::new(),
            newest: None,
            arrivals: 0,
        }
    }

    pub fn push(&mut self, packet: CapturedPacket) {
        let ts = packet.packet.ts;
        self.newest = Some(self.newest.map_or(ts, |newest| newest.max(ts)));
        self.held.push(Reverse(Held {
            ts,
            arrival: self.arrivals,
            packet,
        }));
        self.arrivals += 1;
    }

    /// The oldest packet once no packet still to come can be older.
    pub fn pop_due(&mut self) -> Option<CapturedPacket> {
        let Reverse(oldest) = self.held.peek()?;
        let settled = self
            .newest
            .and_then(|newest| newest.checked_sub(self.window))
            .is_some_and(|horizon| oldest.ts <= horizon);
        if settled || self.held.len() > MAX_HELD {
            self.pop()
        } else {
            None
        }
    }

    /// The oldest packet held, due or not: for the end of the file.
    pub fn pop(&mut self) -> Option<CapturedPacket> {
        self.held.pop().map(|Reverse(held)| held.packet)
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.ts, self.arrival) == (other.ts, other.arrival)
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ts, self.arrival).cmp(&(other.ts, other.arrival))
    }
}
