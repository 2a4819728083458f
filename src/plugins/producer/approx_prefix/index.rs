//! The routing-history index of the approximate producer: per endpoint an LRU set of block
//! keys bounded by a capacity, and a sharded reverse map key -> endpoints holding it.
//! Eviction from an endpoint's LRU removes it from the reverse map. Locks are short and
//! never nested in the opposite order (endpoint LRU, then reverse-map shard).
//!
//! Cost per recorded key (it is on every request's path: a 10 KB prompt records ~40 keys):
//! the keys are xxh64 values, hashed again with foldhash (seeded per process, so crafted
//! prompts cannot aim at one bucket) instead of SipHash, and the LRU order is a queue of
//! (stamp, key) with lazy deletion instead of an ordered map: a touch is one map insert and one
//! push, an eviction pops until it finds a live stamp, and the queue is compacted when stale
//! entries outnumber live ones (amortised O(1), at most 2x the live keys plus a constant).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use smallvec::SmallVec;

use crate::endpoints::model::EndpointId;

const SHARDS: usize = 32;

/// Stale queue entries tolerated above the live count before a compaction.
const COMPACT_SLACK: usize = 1024;

type KeyMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// Endpoints holding one key; two inline before spilling to the heap.
type Holders = SmallVec<[EndpointId; 2]>;

/// Recency-ordered set of keys with a capacity.
#[derive(Debug, Default)]
struct Lru {
    /// Live keys and the stamp of their latest touch.
    stamp_of: KeyMap<u64>,
    /// Touches in order, oldest first; an entry is stale when its key was touched again
    /// later (or evicted).
    order: VecDeque<(u64, u64)>,
    next_stamp: u64,
}

impl Lru {
    /// Touches `key`; returns whether it is new. Keys evicted to stay within `capacity` are
    /// appended to `evicted`.
    fn touch(&mut self, key: u64, capacity: usize, evicted: &mut Vec<u64>) -> bool {
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        let fresh = self.stamp_of.insert(key, stamp).is_none();
        self.order.push_back((stamp, key));
        while self.stamp_of.len() > capacity.max(1) {
            let Some((stamp, oldest)) = self.order.pop_front() else { break };
            if self.stamp_of.get(&oldest) == Some(&stamp) {
                self.stamp_of.remove(&oldest);
                evicted.push(oldest);
            }
        }
        if self.order.len() > 2 * self.stamp_of.len() + COMPACT_SLACK {
            let live = &self.stamp_of;
            self.order.retain(|(stamp, key)| live.get(key) == Some(stamp));
        }
        fresh
    }

    fn keys(self) -> impl Iterator<Item = u64> {
        self.stamp_of.into_keys()
    }
}

/// The index.
#[derive(Debug)]
pub struct ApproxIndex {
    servers: Mutex<HashMap<EndpointId, Lru>>,
    reverse: Vec<RwLock<KeyMap<Holders>>>,
    /// Live (key, endpoint) entries over all LRUs, kept under the `servers` lock, so the size
    /// gauge every request sets costs a load instead of a walk over the endpoints.
    entries: AtomicUsize,
}

impl Default for ApproxIndex {
    fn default() -> Self {
        Self {
            servers: Mutex::new(HashMap::new()),
            reverse: (0..SHARDS).map(|_| RwLock::new(KeyMap::default())).collect(),
            entries: AtomicUsize::new(0),
        }
    }
}

/// The reverse-map shard of `key` (its top bits: the low bits pick the bucket inside).
fn shard(key: u64) -> usize {
    (key >> 59) as usize % SHARDS
}

impl ApproxIndex {
    /// Records that `endpoint` now holds `keys`, evicting its least recent keys beyond
    /// `capacity`.
    pub fn add(&self, endpoint: &EndpointId, keys: &[u64], capacity: usize) {
        let mut added = Vec::with_capacity(keys.len());
        let mut evicted = Vec::new();
        {
            let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
            let lru = servers.entry(endpoint.clone()).or_default();
            let before = lru.stamp_of.len();
            for &k in keys {
                if lru.touch(k, capacity, &mut evicted) {
                    added.push(k);
                }
            }
            let after = lru.stamp_of.len();
            if after >= before {
                self.entries.fetch_add(after - before, Ordering::Relaxed);
            } else {
                self.entries.fetch_sub(before - after, Ordering::Relaxed);
            }
        }
        for k in added {
            let mut map = self.reverse[shard(k)].write().unwrap_or_else(|p| p.into_inner());
            let holders = map.entry(k).or_default();
            if !holders.contains(endpoint) {
                holders.push(endpoint.clone());
            }
        }
        for k in evicted {
            self.unlink(k, endpoint);
        }
    }

    fn unlink(&self, key: u64, endpoint: &str) {
        let mut map = self.reverse[shard(key)].write().unwrap_or_else(|p| p.into_inner());
        if let Some(holders) = map.get_mut(&key) {
            holders.retain(|e| &**e != endpoint);
            if holders.is_empty() {
                map.remove(&key);
            }
        }
    }

    /// Per endpoint, the number of the request's blocks it holds, walking `keys` in order and
    /// stopping at the first key nobody holds. Each endpoint appears once, in no set order.
    pub fn match_counts(&self, keys: &[u64]) -> Vec<(EndpointId, usize)> {
        let mut counts: HashMap<EndpointId, usize, foldhash::fast::RandomState> = HashMap::default();
        for &k in keys {
            let map = self.reverse[shard(k)].read().unwrap_or_else(|p| p.into_inner());
            let Some(holders) = map.get(&k) else { break };
            for h in holders {
                match counts.get_mut(h) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(h.clone(), 1);
                    }
                }
            }
        }
        counts.into_iter().collect()
    }

    /// Drops every endpoint not accepted by `keep`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let removed: Vec<(EndpointId, Vec<u64>)> = {
            let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
            let gone: Vec<EndpointId> = servers.keys().filter(|id| !keep(id)).cloned().collect();
            let removed: Vec<(EndpointId, Vec<u64>)> =
                gone.into_iter().filter_map(|id| servers.remove(&id).map(|lru| (id, lru.keys().collect()))).collect();
            let entries = removed.iter().map(|(_, keys): &(EndpointId, Vec<u64>)| keys.len()).sum();
            self.entries.fetch_sub(entries, Ordering::Relaxed);
            removed
        };
        for (id, keys) in removed {
            for k in keys {
                self.unlink(k, &id);
            }
        }
    }

    /// Total (key, endpoint) entries.
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_stop_at_the_first_unknown_block() {
        let idx = ApproxIndex::default();
        let a: EndpointId = "a".into();
        let b: EndpointId = "b".into();
        idx.add(&a, &[1, 2, 3], 100);
        idx.add(&b, &[1, 2], 100);
        let c: HashMap<_, _> = idx.match_counts(&[1, 2, 3, 4]).into_iter().collect();
        assert_eq!(c[&a], 3);
        assert_eq!(c[&b], 2);
        assert!(idx.match_counts(&[9, 1]).is_empty());
    }

    #[test]
    fn capacity_evicts_least_recent_and_unlinks() {
        let idx = ApproxIndex::default();
        let a: EndpointId = "a".into();
        idx.add(&a, &[1, 2, 3], 2);
        assert_eq!(idx.len(), 2);
        assert!(idx.match_counts(&[1]).is_empty());
        assert_eq!(idx.match_counts(&[2, 3]), vec![(a, 2)]);
    }

    #[test]
    fn a_retouched_key_outlives_older_ones_and_the_queue_stays_bounded() {
        let mut lru = Lru::default();
        let mut evicted = Vec::new();
        assert!(lru.touch(1, 2, &mut evicted));
        assert!(lru.touch(2, 2, &mut evicted));
        for _ in 0..10_000 {
            assert!(!lru.touch(1, 2, &mut evicted), "1 is held");
        }
        assert!(lru.order.len() <= 2 * lru.stamp_of.len() + COMPACT_SLACK, "{}", lru.order.len());
        assert!(lru.touch(3, 2, &mut evicted));
        assert_eq!(evicted, vec![2], "2 is the least recent, 1 was touched after it");
        assert_eq!(lru.keys().collect::<std::collections::BTreeSet<_>>(), [1, 3].into());
    }

    #[test]
    fn retain_drops_departed_endpoints() {
        let idx = ApproxIndex::default();
        idx.add(&"a".into(), &[1], 10);
        idx.add(&"b".into(), &[1], 10);
        idx.retain(|id| id == "b");
        let c = idx.match_counts(&[1]);
        assert_eq!(c.len(), 1);
        assert_eq!(&*c[0].0, "b");
    }

    proptest::proptest! {
        /// The kept count is the walk over every LRU it replaced, whatever the adds,
        /// evictions and departures.
        #[test]
        fn len_is_the_sum_of_the_lrus(ops in proptest::collection::vec(
            (0u8..4, proptest::collection::vec(0u64..40, 0..12), 1usize..8, proptest::bool::weighted(0.1)), 0..60)) {
            let idx = ApproxIndex::default();
            for (endpoint, keys, capacity, depart) in ops {
                let id: EndpointId = format!("e{endpoint}").into();
                if depart {
                    idx.retain(|e| *e != *id);
                } else {
                    idx.add(&id, &keys, capacity);
                }
                let walked: usize =
                    idx.servers.lock().unwrap().values().map(|l| l.stamp_of.len()).sum();
                proptest::prop_assert_eq!(idx.len(), walked);
            }
        }
    }
}
