//! The one kind of map the analyzers keep state in: bounded, and ordered by age.
use std::hash::{BuildHasher, Hash, RandomState};

use hashbrown::HashTable;

/// A map that holds at most `capacity` entries, kept in the order they were inserted or last
/// refreshed. Making room for a new key evicts the stalest entry, and each such eviction is
/// counted, so a table that is too small for the traffic shows in the summary.
///
/// Keys come off the wire, so they are hashed with the standard library's keyed SipHash,
/// unless they are numbers the analyzer handed out itself, or carry a keyed hash of their own
/// (`FastHash`).
///
/// The entries live side by side in pages, linked by position from stalest to freshest, and
/// the hash index holds positions: in a storm the analyzers keep hundreds of thousands of
/// entries, which one allocation each would burden with the allocator's overhead.
pub struct Table<K, V, S = RandomState> {
    /// Dense: removing an entry moves the last one into its place.
    entries: Pages<Entry<K, V>>,
    /// Positions in `entries`, found by their key's hash.
    index: HashTable<u32>,
    hasher: S,
    stalest: u32,
    freshest: u32,
    capacity: usize,
    evictions: u64,
}

struct Entry<K, V> {
    key: K,
    value: V,
    /// Positions of the entries on either side in age, or `NONE`.
    staler: u32,
    fresher: u32,
}

/// No position: the end of the age order. `capacity` keeps positions below it.
const NONE: u32 = u32::MAX;

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
            entries: Pages::default(),
            index: HashTable::new(),
            hasher: S::default(),
            stalest: NONE,
            freshest: NONE,
            capacity: capacity.clamp(1, NONE as usize),
            evictions: 0,
        }
    }

    /// Inserts or replaces `key`'s value and makes it the freshest entry; returns the entry
    /// evicted to make room, if one was.
    pub fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        let hash = self.hasher.hash_one(&key);
        if let Some(at) = self.position_hashed(hash, &key) {
            self.entries[at].value = value;
            self.make_freshest(at);
            return None;
        }
        let evicted = if self.entries.len() as usize >= self.capacity {
            self.evictions += 1;
            self.remove_at(self.stalest)
        } else {
            None
        };
        let at = self.entries.push(Entry {
            key,
            value,
            staler: NONE,
            fresher: NONE,
        });
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .insert_unique(hash, at, |&at| hasher.hash_one(&entries[at].key));
        self.link_freshest(at);
        evicted
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        let at = self.position(key)?;
        Some(&self.entries[at].value)
    }

    /// The value, without changing its age.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = self.position(key)?;
        Some(&mut self.entries[at].value)
    }

    /// The value, made the freshest entry.
    pub fn refresh(&mut self, key: &K) -> Option<&mut V> {
        let at = self.position(key)?;
        self.make_freshest(at);
        Some(&mut self.entries[at].value)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        let at = self.position_hashed(hash, key)?;
        Some(self.remove_hashed(at, hash).1)
    }

    /// Removes and returns the stalest entry if `is_done` says it is done with.
    pub fn pop_stalest_if(&mut self, is_done: impl FnOnce(&K, &V) -> bool) -> Option<(K, V)> {
        let stalest = self.entries.get(self.stalest)?;
        if is_done(&stalest.key, &stalest.value) {
            self.remove_at(self.stalest)
        } else {
            None
        }
    }

    /// Every entry, stalest first.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let mut at = self.stalest;
        std::iter::from_fn(move || {
            let entry = self.entries.get(at)?;
            at = entry.fresher;
            Some((&entry.key, &entry.value))
        })
    }

    /// Empties the table, stalest entry first.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        std::iter::from_fn(|| self.remove_at(self.stalest))
    }

    /// How many entries were dropped to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn position(&self, key: &K) -> Option<u32> {
        self.position_hashed(self.hasher.hash_one(key), key)
    }

    /// The position of `key`, whose hash is `hash`.
    fn position_hashed(&self, hash: u64, key: &K) -> Option<u32> {
        let entries = &self.entries;
        self.index
            .find(hash, |&at| entries[at].key == *key)
            .copied()
    }

    /// Removes the entry at `at` (none if `at` is `NONE`), and moves the last entry into its
    /// place.
    fn remove_at(&mut self, at: u32) -> Option<(K, V)> {
        let hash = self.hasher.hash_one(&self.entries.get(at)?.key);
        Some(self.remove_hashed(at, hash))
    }

    /// Removes the entry at `at`, whose key's hash is `hash`, as `remove_at` does.
    fn remove_hashed(&mut self, at: u32, hash: u64) -> (K, V) {
        self.unlink(at);
        self.index
            .find_entry(hash, |&other| other == at)
            .expect("every entry is indexed")
            .remove();
        let removed = self.entries.swap_remove(at);
        if let Some(moved) = self.entries.get(at) {
            let from = self.entries.len();
            let (staler, fresher) = (moved.staler, moved.fresher);
            *self
                .index
                .find_mut(self.hasher.hash_one(&moved.key), |&other| other == from)
                .expect("every entry is indexed") = at;
            self.link(staler, at);
            self.link(at, fresher);
        }
        (removed.key, removed.value)
    }

    fn make_freshest(&mut self, at: u32) {
        if at != self.freshest {
            self.unlink(at);
            self.link_freshest(at);
        }
    }

    /// Takes the entry at `at` out of the age order.
    fn unlink(&mut self, at: u32) {
        let entry = &self.entries[at];
        self.link(entry.staler, entry.fresher);
    }

    /// Puts the entry at `at`, out of the age order, at its fresh end.
    fn link_freshest(&mut self, at: u32) {
        self.link(self.freshest, at);
        self.link(at, NONE);
    }

    /// Makes the entry at `fresher` come right after the one at `staler` in age; `NONE` on
    /// either side is that end of the order.
    fn link(&mut self, staler: u32, fresher: u32) {
        match self.entries.get_mut(staler) {
            Some(entry) => entry.fresher = fresher,
            None => self.stalest = fresher,
        }
        match self.entries.get_mut(fresher) {
            Some(entry) => entry.staler = staler,
            None => self.freshest = staler,
        }
    }
}

/// Where a table's entries live: in pages of at most `PAGE` entries, each but the last full.
/// One `Vec` of them all would double past the entries it holds, and copy them all as it does.
struct Pages<T> {
    pages: Vec<Vec<T>>,
}

/// Entries in a page: a power of two, so that a page growing by doubling stops at it.
const PAGE: u32 = 1024;

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Self { pages: Vec::new() }
    }
}

impl<T> Pages<T> {
    fn len(&self) -> u32 {
        let full = self.pages.len().saturating_sub(1) as u32;
        full * PAGE + self.pages.last().map_or(0, |last| last.len() as u32)
    }

    fn get(&self, at: u32) -> Option<&T> {
        self.pages
            .get((at / PAGE) as usize)?
            .get((at % PAGE) as usize)
    }

    fn get_mut(&mut self, at: u32) -> Option<&mut T> {
        self.pages
            .get_mut((at / PAGE) as usize)?
            .get_mut((at % PAGE) as usize)
    }

    /// Adds `item` last; returns its position.
    fn push(&mut self, item: T) -> u32 {
        let at = self.len();
        match self.pages.last_mut() {
            Some(last) if last.len() < PAGE as usize => last.push(item),
            _ => self.pages.push(vec![item]),
        }
        at
    }

    /// Removes the item at `at`, putting the last item in its place.
    fn swap_remove(&mut self, at: u32) -> T {
        let last_page = self.pages.last_mut().expect("`at` is a position");
        let last = last_page.pop().expect("only the last page may be empty");
        if last_page.is_empty() {
            self.pages.pop();
        }
        match self.get_mut(at) {
            Some(item) => std::mem::replace(item, last),
            None => last,
        }
    }
}

impl<T> std::ops::Index<u32> for Pages<T> {
    type Output = T;

    fn index(&self, at: u32) -> &T {
        self.get(at).expect("a position")
    }
}

impl<T> std::ops::IndexMut<u32> for Pages<T> {
    fn index_mut(&mut self, at: u32) -> &mut T {
        self.get_mut(at).expect("a position")
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

    /// Removals move the last entry into the hole: every mix of operations keeps the keys, the
    /// values and the age order a plain list of the same entries would, within a page and
    /// across several.
    #[test]
    fn entries_keep_their_values_and_age_through_removals_and_refreshes() {
        follow_a_list_by_age(16, 24, 4000);
        let capacity = 2 * PAGE + 10;
        follow_a_list_by_age(capacity, 2 * capacity, 40 * capacity);
    }

    /// Does `steps` random operations on `keys` keys to a table of `capacity` entries and to a
    /// list kept stalest first, and checks that they agree.
    fn follow_a_list_by_age(capacity: u32, keys: u32, steps: u32) {
        let mut table = Table::<u32, u32, FastHash>::with_hasher(capacity as usize);
        let mut by_age: Vec<(u32, u32)> = Vec::new();
        let mut seed = 7u32;
        for step in 0..steps {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let key = (seed >> 8) % keys;
            let present = by_age.iter().position(|(k, _)| *k == key);
            match (seed >> 24) % 5 {
                0 | 1 => {
                    let evicted = table.insert(key, step);
                    if let Some(at) = present {
                        by_age.remove(at);
                    } else if by_age.len() == capacity as usize {
                        assert_eq!(evicted, Some(by_age.remove(0)));
                    }
                    by_age.push((key, step));
                }
                2 => {
                    assert_eq!(table.remove(&key), present.map(|at| by_age.remove(at).1));
                }
                3 => {
                    let refreshed = table.refresh(&key).copied();
                    if let Some(at) = present {
                        let entry = by_age.remove(at);
                        by_age.push(entry);
                    }
                    assert_eq!(refreshed, present.map(|_| by_age[by_age.len() - 1].1));
                }
                _ => {
                    let popped = table.pop_stalest_if(|key, _| key % 2 == 0);
                    let expected = by_age.first().filter(|(k, _)| k % 2 == 0).copied();
                    if expected.is_some() {
                        by_age.remove(0);
                    }
                    assert_eq!(popped, expected);
                }
            }
            if step % (capacity / 4) == 0 {
                let entries: Vec<(u32, u32)> = table.iter().map(|(k, v)| (*k, *v)).collect();
                assert_eq!(entries, by_age);
                for (key, value) in &by_age {
                    assert_eq!(table.get(key), Some(value));
                }
            }
        }
        assert!(table.evictions() > 0, "filled up");
        assert_eq!(table.drain().collect::<Vec<_>>(), by_age);
        assert_eq!(table.iter().count(), 0);
    }
}
