//! Reporting a finding that keeps happening without reporting every occurrence.
use std::{
    hash::Hash,
    time::{Duration, SystemTime},
};

use super::table::Table;

/// A finding that carries how often it occurred.
pub trait Repeated {
    /// The finding as of its `count`th occurrence, the last one at `last`.
    fn repeated(&mut self, count: u64, last: SystemTime);
}

/// Holds back repeats: the first occurrence is reported at once, later ones at most once per
/// `interval`, each report carrying the count so far.
pub struct Repeats<K, F> {
    interval: Duration,
    seen: Table<K, Seen<F>>,
}

struct Seen<F> {
    count: u64,
    reported_count: u64,
    /// The finding was amended since it was last reported.
    amended: bool,
    reported_at: SystemTime,
    last: SystemTime,
    finding: F,
}

impl<K: Hash + Eq, F: Repeated + Clone> Repeats<K, F> {
    pub fn new(interval: Duration, capacity: usize) -> Self {
        Self {
            interval,
            seen: Table::new(capacity),
        }
    }

    /// Counts an occurrence of `key` at `at`; returns the finding to report now, if any.
    /// `describe` is only called for the first occurrence.
    pub fn occurred(
        &mut self,
        key: K,
        at: SystemTime,
        describe: impl FnOnce() -> Option<F>,
    ) -> Option<F> {
        self.occurred_after(key, at, 0, describe)
    }

    /// As [`Repeats::occurred`], where a first occurrence also proves `earlier` ones that could
    /// not be told apart from chance until it came (the first rounds of a loop through other
    /// nodes): they are counted with it.
    pub fn occurred_after(
        &mut self,
        key: K,
        at: SystemTime,
        earlier: u64,
        describe: impl FnOnce() -> Option<F>,
    ) -> Option<F> {
        if let Some(seen) = self.seen.refresh(&key) {
            seen.count += 1;
            seen.last = seen.last.max(at);
            let due = at
                .duration_since(seen.reported_at)
                .is_ok_and(|elapsed| elapsed >= self.interval);
            if !due {
                return None;
            }
            seen.reported_at = at;
            seen.reported_count = seen.count;
            seen.amended = false;
            seen.finding.repeated(seen.count, at);
            return Some(seen.finding.clone());
        }
        let finding = describe()?;
        let count = 1 + earlier;
        self.seen.insert(
            key,
            Seen {
                count,
                reported_count: count,
                amended: false,
                reported_at: at,
                last: at,
                finding: finding.clone(),
            },
        );
        Some(finding)
    }

    /// When `key` last occurred, if it is held.
    pub fn last_occurred(&self, key: &K) -> Option<SystemTime> {
        self.seen.get(key).map(|seen| seen.last)
    }

    /// Changes what the next report of `key`, if it is held, says; `unreported` reports the
    /// change even if `key` does not occur again.
    pub fn amend(&mut self, key: &K, change: impl FnOnce(&mut F)) {
        if let Some(seen) = self.seen.get_mut(key) {
            change(&mut seen.finding);
            seen.amended = true;
        }
    }

    /// The final count of every finding that occurred again, or was amended, since it was last
    /// reported.
    pub fn unreported(&mut self) -> impl Iterator<Item = F> + '_ {
        self.seen.drain().filter_map(|(_, mut seen)| {
            (seen.count > seen.reported_count || seen.amended).then(|| {
                seen.finding.repeated(seen.count, seen.last);
                seen.finding
            })
        })
    }

    pub fn evictions(&self) -> u64 {
        self.seen.evictions()
    }
}
