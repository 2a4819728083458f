//! The routing-history index of the approximate producer: per endpoint an LRU set of block
//! keys bounded by a capacity, and a sharded reverse map key -> endpoints holding it.
//! Eviction from an endpoint's LRU removes it from the reverse map. Each endpoint's LRU has
//! its own lock, so recording a request for one endpoint never waits for a record of another
//! (a decision's own record and peers' records applied by replica sync run side by side;
//! with one lock for all LRUs a decision could wait for a whole peer record of ~100 keys).
//! Lock order: the endpoint map (read for a record, write to add or drop an endpoint), then
//! one endpoint's LRU, then one reverse-map shard at a time; a record holds the map's read
//! lock to its end, so a departing endpoint's keys cannot be linked again after they were
//! unlinked.
//!
//! Cost per recorded key (it is on every request's path: a 10 KB prompt records ~40 keys):
//! the keys are xxh64 values, hashed again with foldhash (seeded per process, so crafted
//! prompts cannot aim at one bucket) instead of SipHash, and the LRU order is a queue of
//! (stamp, key) with lazy deletion instead of an ordered map: a touch is one map insert and one
//! push, an eviction pops until it finds a live stamp, and the queue is compacted when stale
//! entries outnumber live ones (amortised O(1), at most 2x the live keys plus a constant).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use smallvec::SmallVec;

use crate::endpoints::model::EndpointId;

const SHARDS: usize = 32;
const _: () = assert!(SHARDS <= 64, "match_counts keeps the wanted shards in a u64");

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
    servers: RwLock<HashMap<EndpointId, Mutex<Lru>>>,
    reverse: Vec<RwLock<KeyMap<Holders>>>,
    /// Live (key, endpoint) entries over all LRUs, adjusted by each record under its LRU's lock
    /// (and by `retain` under the map's write lock), so the size gauge every request sets costs
    /// a load instead of a walk over the endpoints.
    entries: AtomicUsize,
}

impl Default for ApproxIndex {
    fn default() -> Self {
        Self {
            servers: RwLock::new(HashMap::new()),
            reverse: (0..SHARDS).map(|_| RwLock::new(KeyMap::default())).collect(),
            entries: AtomicUsize::new(0),
        }
    }
}

/// The reverse-map shard of `key` (its top bits: the low bits pick the bucket inside).
fn shard(key: u64) -> usize {
    (key >> 59) as usize % SHARDS
}

/// Adds `keys` blocks to each endpoint of `holders`.
fn count_run(counts: &mut HashMap<EndpointId, usize, foldhash::fast::RandomState>, holders: &Holders, keys: usize) {
    for h in holders {
        match counts.get_mut(h) {
            Some(n) => *n += keys,
            None => {
                counts.insert(h.clone(), keys);
            }
        }
    }
}

impl ApproxIndex {
    /// Records that `endpoint` now holds `keys`, evicting its least recent keys beyond
    /// `capacity`.
    pub fn add(&self, endpoint: &EndpointId, keys: &[u64], capacity: usize) {
        let read = || self.servers.read().unwrap_or_else(|p| p.into_inner());
        {
            let servers = read();
            if let Some(lru) = servers.get(endpoint) {
                return self.record(lru, endpoint, keys, capacity);
            }
        }
        self.servers.write().unwrap_or_else(|p| p.into_inner()).entry(endpoint.clone()).or_default();
        // An endpoint dropped between the two locks is simply not recorded.
        if let Some(lru) = read().get(endpoint) {
            self.record(lru, endpoint, keys, capacity);
        }
    }

    /// [`Self::add`] with the endpoint map read-locked by the caller and `lru` its endpoint's.
    fn record(&self, lru: &Mutex<Lru>, endpoint: &EndpointId, keys: &[u64], capacity: usize) {
        let mut added = Vec::with_capacity(keys.len());
        let mut evicted = Vec::new();
        {
            let mut lru = lru.lock().unwrap_or_else(|p| p.into_inner());
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
    ///
    /// Consecutive keys with the same holders (a prompt recorded on the same endpoints, the
    /// common case) are counted as one run: endpoints are hashed only where the holders
    /// change, not once per holder and key.
    ///
    /// Locks: a first key nobody holds costs its shard's lock alone. Otherwise each shard the
    /// keys fall in is read-locked once, in ascending order, for the whole walk (not once per
    /// key: two atomic operations per key were a fifth of a 10 KB prompt's walk). Writers
    /// never hold two shard locks, so the order cannot deadlock, and a writer waits at most
    /// one walk.
    pub fn match_counts(&self, keys: &[u64]) -> Vec<(EndpointId, usize)> {
        let read = |s: usize| self.reverse[s].read().unwrap_or_else(|p| p.into_inner());
        let Some(&first) = keys.first() else { return Vec::new() };
        if !read(shard(first)).contains_key(&first) {
            return Vec::new();
        }
        let wanted = keys.iter().fold(0u64, |m, k| m | 1 << shard(*k));
        let maps: [Option<RwLockReadGuard<'_, KeyMap<Holders>>>; SHARDS] =
            std::array::from_fn(|s| (wanted >> s & 1 == 1).then(|| read(s)));
        let mut counts: HashMap<EndpointId, usize, foldhash::fast::RandomState> = HashMap::default();
        let mut run = Holders::new();
        let mut run_keys = 0;
        for &k in keys {
            let Some(holders) = maps[shard(k)].as_ref().and_then(|map| map.get(&k)) else { break };
            // Holder lists compare element by element; `Arc<str>` equality checks the pointer
            // before the text (a peer's record carries its own copy of a name).
            if run == *holders {
                run_keys += 1;
            } else {
                count_run(&mut counts, &run, run_keys);
                run.clone_from(holders);
                run_keys = 1;
            }
        }
        count_run(&mut counts, &run, run_keys);
        counts.into_iter().collect()
    }

    /// Drops every endpoint not accepted by `keep`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let removed: Vec<(EndpointId, Vec<u64>)> = {
            let mut servers = self.servers.write().unwrap_or_else(|p| p.into_inner());
            let gone: Vec<EndpointId> = servers.keys().filter(|id| !keep(id)).cloned().collect();
            let removed: Vec<(EndpointId, Vec<u64>)> = (gone.into_iter())
                .filter_map(|id| {
                    let lru = servers.remove(&id)?.into_inner().unwrap_or_else(|p| p.into_inner());
                    Some((id, lru.keys().collect()))
                })
                .collect();
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
    fn a_record_does_not_wait_for_a_record_of_another_endpoint() {
        let idx = ApproxIndex::default();
        let (a, b): (EndpointId, EndpointId) = ("a".into(), "b".into());
        idx.add(&a, &[9], 10);
        idx.add(&b, &[9], 10);
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let servers = idx.servers.read().unwrap();
            // A record for b is in progress (its LRU is locked) ...
            let b_busy = servers[&b].lock().unwrap();
            // ... while one for a runs to its end.
            s.spawn(|| {
                idx.add(&a, &[1, 2], 10);
                done_tx.send(()).unwrap();
            });
            let finished = done.recv_timeout(std::time::Duration::from_secs(30));
            drop(b_busy);
            drop(servers);
            assert!(finished.is_ok(), "the record for a waited for b's");
        });
        let c: HashMap<_, _> = idx.match_counts(&[1, 2]).into_iter().collect();
        assert_eq!(c[&a], 2);
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
        /// Counting runs of equal holders gives the per-key count: per endpoint, the keys it
        /// holds before the first key nobody holds.
        #[test]
        fn match_counts_are_the_per_key_counts(
            adds in proptest::collection::vec((0u8..4, proptest::collection::vec(0u64..12, 0..10)), 0..20),
            query in proptest::collection::vec(0u64..12, 0..16),
        ) {
            let idx = ApproxIndex::default();
            // Each endpoint's name as a fresh allocation per record, as a peer's record is.
            for (endpoint, keys) in &adds {
                idx.add(&format!("e{endpoint}").into(), keys, 100);
            }
            let mut want: HashMap<String, usize> = HashMap::new();
            for k in &query {
                let holders: Vec<u8> = (0..4u8)
                    .filter(|e| adds.iter().any(|(a, keys)| a == e && keys.contains(k)))
                    .collect();
                if holders.is_empty() {
                    break;
                }
                for e in holders {
                    *want.entry(format!("e{e}")).or_default() += 1;
                }
            }
            let got: HashMap<String, usize> =
                idx.match_counts(&query).into_iter().map(|(e, n)| (e.to_string(), n)).collect();
            proptest::prop_assert_eq!(got, want);
        }

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
                    idx.servers.read().unwrap().values().map(|l| l.lock().unwrap().stamp_of.len()).sum();
                proptest::prop_assert_eq!(idx.len(), walked);
            }
        }
    }
}
