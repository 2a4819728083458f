//! A model of one endpoint's encoder cache, following vLLM's rule: entries used by requests
//! in flight are pinned; entries no request references are reclaimed oldest first when room
//! is needed. Sizes are in cache units (encoder embeddings, or 1 per item in the MiB
//! compatibility mode). Pure bookkeeping; the producer owns the locking.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug)]
struct Entry {
    size: u64,
    /// Requests in flight that use this entry.
    refs: u32,
    /// Position in the reclaim order while unreferenced.
    freeable_at: Option<u64>,
}

/// The cache model of one endpoint.
#[derive(Debug)]
pub struct PodCache {
    capacity: u64,
    used: u64,
    entries: HashMap<u128, Entry>,
    /// Unreferenced entries, oldest first (sequence number -> key).
    freeable: BTreeMap<u64, u128>,
    next_seq: u64,
}

impl PodCache {
    /// An empty cache of `capacity` units (at least 1).
    pub fn new(capacity: u64) -> Self {
        Self { capacity: capacity.max(1), used: 0, entries: HashMap::new(), freeable: BTreeMap::new(), next_seq: 0 }
    }

    /// True when the item is cached or being computed.
    pub fn contains(&self, key: u128) -> bool {
        self.entries.contains_key(&key)
    }

    /// Items tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Units in use.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Pins the item for one request (inserting it when absent). False when it does not fit
    /// without reclaiming an entry another request still uses; nothing changes then.
    pub fn acquire(&mut self, key: u128, size: u64) -> bool {
        if let Some(e) = self.entries.get_mut(&key) {
            if let Some(seq) = e.freeable_at.take() {
                self.freeable.remove(&seq);
            }
            e.refs = e.refs.saturating_add(1);
            return true;
        }
        let size = size.max(1);
        if !self.make_room(size) {
            return false;
        }
        self.entries.insert(key, Entry { size, refs: 1, freeable_at: None });
        self.used += size;
        true
    }

    /// Drops one request's pin; the last one makes the entry the newest reclaimable one.
    pub fn release(&mut self, key: u128) {
        let Some(e) = self.entries.get_mut(&key) else { return };
        e.refs = e.refs.saturating_sub(1);
        if e.refs == 0 && e.freeable_at.is_none() {
            let seq = self.next_seq;
            self.next_seq += 1;
            e.freeable_at = Some(seq);
            self.freeable.insert(seq, key);
        }
    }

    /// Records an item whose encoder output was computed without a pin (it did not fit at
    /// dispatch): inserted as the newest reclaimable entry when it fits now; an existing
    /// unreferenced entry becomes the newest. False when it still does not fit.
    pub fn commit(&mut self, key: u128, size: u64) -> bool {
        let seq = self.next_seq;
        if let Some(e) = self.entries.get_mut(&key) {
            if e.refs == 0 {
                if let Some(old) = e.freeable_at.replace(seq) {
                    self.freeable.remove(&old);
                }
                self.freeable.insert(seq, key);
                self.next_seq += 1;
            }
            return true;
        }
        let size = size.max(1);
        if !self.make_room(size) {
            return false;
        }
        self.entries.insert(key, Entry { size, refs: 0, freeable_at: Some(seq) });
        self.freeable.insert(seq, key);
        self.next_seq += 1;
        self.used += size;
        true
    }

    /// Reclaims the oldest unreferenced entries until `size` more units fit; false (and no
    /// change) when even all of them would not make enough room.
    fn make_room(&mut self, size: u64) -> bool {
        if size > self.capacity {
            return false;
        }
        let needed = (self.used + size).saturating_sub(self.capacity);
        if needed == 0 {
            return true;
        }
        let mut reclaimable = 0;
        for key in self.freeable.values() {
            if reclaimable >= needed {
                break;
            }
            reclaimable += self.entries.get(key).map_or(0, |e| e.size);
        }
        if reclaimable < needed {
            return false;
        }
        while self.used + size > self.capacity {
            let Some((_, key)) = self.freeable.pop_first() else { break };
            if let Some(e) = self.entries.remove(&key) {
                self.used -= e.size;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_unreferenced_entry_is_reclaimed_first() {
        let mut c = PodCache::new(2);
        assert!(c.commit(1, 1) && c.commit(2, 1));
        assert!(c.commit(1, 1), "touching 1 makes it the newest");
        assert!(c.commit(3, 1));
        assert!(c.contains(1) && c.contains(3) && !c.contains(2), "2 was the oldest");
        assert_eq!((c.len(), c.used()), (2, 2));
    }

    #[test]
    fn pinned_entries_are_never_reclaimed() {
        let mut c = PodCache::new(2);
        assert!(c.acquire(1, 1) && c.acquire(2, 1));
        assert!(!c.acquire(3, 1), "both entries are in use");
        assert!(!c.commit(3, 1));
        assert!(c.contains(1) && c.contains(2) && !c.contains(3));
        c.release(2);
        assert!(c.acquire(3, 1), "2 became reclaimable");
        assert!(!c.contains(2));
        c.release(1);
        c.release(1); // an extra release is harmless
        assert!(c.acquire(1, 1), "re-pinning an unreferenced entry");
        assert!(!c.acquire(4, 1), "1 and 3 pinned again");
    }

    #[test]
    fn sizes_count_against_capacity() {
        let mut c = PodCache::new(10);
        assert!(c.commit(1, 4) && c.commit(2, 4));
        assert!(!c.commit(3, 11), "larger than the whole cache");
        assert!(c.commit(3, 6), "evicts the oldest entry only");
        assert!(!c.contains(1) && c.contains(2) && c.contains(3));
        assert_eq!(c.used(), 10);
        assert!(c.acquire(4, 0), "size 0 counts as 1; evicts 2");
        assert!(!c.contains(2));
        assert_eq!(c.used(), 7);
    }
}
