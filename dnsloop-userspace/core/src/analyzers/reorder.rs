//! Puts observations back in timestamp order before any analyzer sees them.
//!
//! The kernel's ring buffer interleaves the CPUs' records and a capture of several interfaces
//! interleaves their packets, so a reply can arrive before the query it answers. Each observation
//! is held until the newest timestamp seen is `window` past its own.
//!
//! Most observations arrive in order (a capture file's reader orders them already; the ring
//! buffer interleaves the CPUs' records only a little), so those are queued in arrival order,
//! and only the others wait in a heap: an observation is a few hundred bytes, and a heap
//! moves its entries a dozen times on the way out.
use std::{
    cmp::{Ordering, Reverse},
    collections::{BinaryHeap, VecDeque},
    time::{Duration, SystemTime},
};

use crate::observation::Observation;

pub struct Reorder {
    window: Duration,
    capacity: usize,
    /// Observations that arrived in order: sorted, as each came no earlier than the one before.
    in_order: VecDeque<Held>,
    /// The others.
    out_of_order: BinaryHeap<Reverse<Held>>,
    /// The newest timestamp seen, or the latest time a tick reported.
    newest: Option<SystemTime>,
    /// `window` before `newest`: worked out when `newest` moves, as it is asked for more
    /// often than that.
    horizon: Option<SystemTime>,
    /// The timestamp of the last observation released.
    released: Option<SystemTime>,
    arrivals: u64,
    late: u64,
    overflows: u64,
}

/// Observations ordered by timestamp, then by arrival, so equal timestamps keep their order.
struct Held {
    ts: SystemTime,
    arrival: u64,
    obs: Observation,
}

impl Reorder {
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self {
            window,
            capacity: capacity.max(1),
            in_order: VecDeque::new(),
            out_of_order: BinaryHeap::new(),
            newest: None,
            horizon: None,
            released: None,
            arrivals: 0,
            late: 0,
            overflows: 0,
        }
    }

    pub fn push(&mut self, obs: Observation) {
        if self.released.is_some_and(|released| obs.ts < released) {
            // It is released at once, out of order: the analyzers tolerate that, and the
            // summary shows how often it happened.
            self.late += 1;
        }
        self.advance(obs.ts);
        let held = Held {
            ts: obs.ts,
            arrival: self.arrivals,
            obs,
        };
        if self.in_order.back().is_none_or(|last| last.ts <= held.ts) {
            self.in_order.push_back(held);
        } else {
            self.out_of_order.push(Reverse(held));
        }
        self.arrivals += 1;
        if self.held() > self.capacity {
            self.overflows += 1;
        }
    }

    fn held(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    /// The oldest held observation's timestamp, and whether it is the in-order queue's.
    fn oldest(&self) -> Option<(SystemTime, bool)> {
        match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(queued), Some(Reverse(heaped))) if heaped < queued => Some((heaped.ts, false)),
            (Some(queued), _) => Some((queued.ts, true)),
            (None, Some(Reverse(heaped))) => Some((heaped.ts, false)),
            (None, None) => None,
        }
    }

    /// Time has reached `now`.
    pub fn advance(&mut self, now: SystemTime) {
        if self.newest.is_none_or(|newest| now > newest) {
            self.newest = Some(now);
            self.horizon = now.checked_sub(self.window);
        }
    }

    /// Up to when the order is final: no observation at or before it is still expected.
    pub fn horizon(&self) -> Option<SystemTime> {
        self.horizon
    }

    /// The oldest held observation, once it is due: its timestamp has reached the horizon, or
    /// the buffer is over capacity.
    pub fn pop_due(&mut self) -> Option<Observation> {
        let (oldest, queued) = self.oldest()?;
        let due = self.held() > self.capacity || self.horizon.is_some_and(|h| oldest <= h);
        if due {
            self.take(queued)
        } else {
            None
        }
    }

    /// The oldest held observation, due or not: for when the input has ended.
    pub fn pop(&mut self) -> Option<Observation> {
        let (_, queued) = self.oldest()?;
        self.take(queued)
    }

    /// The oldest held observation, from the in-order queue if `queued`, else from the heap.
    fn take(&mut self, queued: bool) -> Option<Observation> {
        let held = if queued {
            self.in_order.pop_front()?
        } else {
            self.out_of_order.pop()?.0
        };
        self.released = Some(
            self.released
                .map_or(held.ts, |released| released.max(held.ts)),
        );
        Some(held.obs)
    }

    /// Observations that arrived after a later one had already been released.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Observations released early because the buffer was full.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.ts, self.arrival).cmp(&(other.ts, other.arrival))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::observations::{ms, query, CLIENT_OUT};

    fn ids(reorder: &mut Reorder) -> Vec<u16> {
        std::iter::from_fn(|| reorder.pop_due())
            .map(|obs| obs.id)
            .collect()
    }

    #[test]
    fn releases_in_timestamp_order_once_the_window_has_passed() {
        let mut reorder = Reorder::new(Duration::from_millis(50), 100);
        for (id, ms) in [(1, 10), (3, 12), (2, 11)] {
            reorder.push(query("a.test.").id(id).at_ms(ms).seen(CLIENT_OUT));
        }
        assert_eq!(ids(&mut reorder), Vec::<u16>::new());
        reorder.push(query("a.test.").id(4).at_ms(61).seen(CLIENT_OUT));
        assert_eq!(ids(&mut reorder), [1, 2]);
        reorder.advance(ms(200));
        assert_eq!(ids(&mut reorder), [3, 4]);
        assert_eq!(reorder.late(), 0);
    }

    #[test]
    fn equal_timestamps_leave_in_arrival_order_whether_they_came_in_order_or_not() {
        let mut reorder = Reorder::new(Duration::from_millis(50), 100);
        for (id, ms) in [(1, 10), (2, 12), (3, 11), (4, 11), (5, 12), (6, 10)] {
            reorder.push(query("a.test.").id(id).at_ms(ms).seen(CLIENT_OUT));
        }
        reorder.advance(ms(100));
        assert_eq!(ids(&mut reorder), [1, 6, 3, 4, 2, 5]);
    }

    #[test]
    fn any_arrival_order_leaves_as_a_stable_sort_by_timestamp() {
        let mut noise: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |below: u64| {
            noise ^= noise << 13;
            noise ^= noise >> 7;
            noise ^= noise << 17;
            noise % below
        };
        let mut reorder = Reorder::new(Duration::from_millis(50), 10_000);
        let mut arrived = Vec::new();
        for id in 0..2_000u16 {
            // Mostly forward, often a little back, with many equal timestamps.
            let at = u64::from(id) / 4 + 30 - next(30);
            arrived.push((at, id));
            reorder.push(query("a.test.").id(id).at_ms(at).seen(CLIENT_OUT));
        }
        arrived.sort_by_key(|&(at, _)| at);
        let expected: Vec<u16> = arrived.into_iter().map(|(_, id)| id).collect();
        let released: Vec<u16> = std::iter::from_fn(|| reorder.pop())
            .map(|obs| obs.id)
            .collect();
        assert_eq!(released, expected);
    }

    #[test]
    fn counts_what_comes_too_late_and_what_overflows() {
        let mut reorder = Reorder::new(Duration::from_millis(50), 2);
        reorder.push(query("a.test.").id(1).at_ms(100).seen(CLIENT_OUT));
        reorder.push(query("a.test.").id(2).at_ms(200).seen(CLIENT_OUT));
        assert_eq!(ids(&mut reorder), [1]);
        reorder.push(query("a.test.").id(3).at_ms(20).seen(CLIENT_OUT));
        assert_eq!(reorder.late(), 1);
        assert_eq!(ids(&mut reorder), [3]);
        reorder.push(query("a.test.").id(4).at_ms(210).seen(CLIENT_OUT));
        reorder.push(query("a.test.").id(5).at_ms(220).seen(CLIENT_OUT));
        assert_eq!(reorder.overflows(), 1);
        assert_eq!(ids(&mut reorder), [2]);
        let rest: Vec<u16> = std::iter::from_fn(|| reorder.pop())
            .map(|obs| obs.id)
            .collect();
        assert_eq!(rest, [4, 5]);
    }
}
