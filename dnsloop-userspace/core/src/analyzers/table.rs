//! The one kind of map the analyzers keep state in: bounded, and ordered by age.
use std::hash::{BuildHasher, Hash, RandomState};

use hashlink::LinkedHashMap;

/// A map that holds at most `capacity` entries, kept in the order they were inserted or last
/// refreshed. Making room for a new key evicts the stalest entry, and each such eviction is
/// counted, so a table that is too small for the traffic shows in the summary.
///
/// Keys come off the wire, so they are hashed with the standard library's keyed SipHash,
/// unless they are numbers the analyzer handed out itself, or carry a keyed hash of their own
/// (`FastHash`).
pub struct Table<K, V, S = RandomState> {
    entries: LinkedHashMap<K, V, S>,
    capacity: usize,
    evictions: u64,
}

/// The hash of keys no packet can choose: ids an analyzer hands out in sequence, and keys that
/// hash themselves as one `u64` they computed with a keyed hash (`packet`). A fast unkeyed hash
/// spreads them over the buckets, instead of a keyed SipHash at every lookup.
pub type FastHash = foldhash::fast::FixedState;

impl<K: Hash + Eq, V> Table<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self::with_hasher(capacity)
    }
}

impl<K: Hash + Eq, V, S: BuildHasher + Default> Table<K, V, S> {
    /// A table hashing its keys with `S`.
    pub fn with_hasher(capacity: usize) -> Self {
        Self {
            entries: LinkedHashMap::with_hasher(S::default()),
            capacity: capacity.max(1),
            evictions: 0,
        }
    }

    /// Inserts or replaces `key`'s value and makes it the freshest entry; returns the entry
    /// evicted to make room, if one was.
    pub fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        let evicted = if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.evictions += 1;
            self.entries.pop_front()
        } else {
            None
        };
        self.entries.insert(key, value);
        evicted
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    /// The value, without changing its age.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key)
    }

    /// The value, made the freshest entry.
    pub fn refresh(&mut self, key: &K) -> Option<&mut V> {
        self.entries.to_back(key)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key)
    }

    /// Removes and returns the stalest entry if `is_done` says it is done with.
    pub fn pop_stalest_if(&mut self, is_done: impl FnOnce(&K, &V) -> bool) -> Option<(K, V)> {
        let (key, value) = self.entries.front()?;
        if is_done(key, value) {
            self.entries.pop_front()
        } else {
            None
        }
    }

    /// Every entry, stalest first.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter()
    }

    /// Empties the table, stalest entry first.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        std::iter::from_fn(|| self.entries.pop_front())
    }

    /// How many entries were dropped to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_the_stalest_entry_and_counts_it() {
        let mut table = Table::new(2);
        table.insert("a", 1);
        table.insert("b", 2);
        table.refresh(&"a");
        table.insert("c", 3);
        assert_eq!(table.get(&"b"), None);
        assert_eq!(table.get(&"a"), Some(&1));
        assert_eq!(table.iter().count(), 2);
        assert_eq!(table.evictions(), 1);
        // Replacing a present key makes no room, so evicts nothing.
        table.insert("c", 4);
        assert_eq!(table.evictions(), 1);
    }

    #[test]
    fn pop_stalest_if_stops_at_the_first_live_entry() {
        let mut table = Table::new(8);
        for (key, value) in [("a", 1), ("b", 5), ("c", 2)] {
            table.insert(key, value);
        }
        assert_eq!(table.pop_stalest_if(|_, value| *value < 3), Some(("a", 1)));
        assert_eq!(table.pop_stalest_if(|_, value| *value < 3), None);
        assert_eq!(table.iter().count(), 2);
    }
}
