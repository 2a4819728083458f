//! The routing-history index of the approximate producer: per endpoint an LRU set of block
//! keys bounded by a capacity, and a sharded reverse map key -> endpoints holding it.
//! Eviction from an endpoint's LRU removes it from the reverse map. Locks are short and
//! never nested in the opposite order (endpoint LRU, then reverse-map shard).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use crate::endpoints::model::EndpointId;

const SHARDS: usize = 32;

/// Recency-ordered set of keys with a capacity.
#[derive(Debug, Default)]
struct Lru {
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    next_stamp: u64,
}

impl Lru {
    /// Touches `key`; returns the keys evicted to stay within `capacity`.
    fn touch(&mut self, key: u64, capacity: usize, evicted: &mut Vec<u64>) -> bool {
        self.next_stamp += 1;
        let fresh = match self.stamp_of.insert(key, self.next_stamp) {
            Some(old) => {
                self.by_stamp.remove(&old);
                false
            }
            None => true,
        };
        self.by_stamp.insert(self.next_stamp, key);
        while self.stamp_of.len() > capacity.max(1) {
            let Some((_, oldest)) = self.by_stamp.pop_first() else { break };
            self.stamp_of.remove(&oldest);
            evicted.push(oldest);
        }
        fresh
    }
}

/// The index.
#[derive(Debug)]
pub struct ApproxIndex {
    servers: Mutex<HashMap<EndpointId, Lru>>,
    reverse: Vec<RwLock<HashMap<u64, Vec<EndpointId>>>>,
}

impl Default for ApproxIndex {
    fn default() -> Self {
        Self {
            servers: Mutex::new(HashMap::new()),
            reverse: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }
}

fn shard(key: u64) -> usize {
    (key as usize) % SHARDS
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
            for &k in keys {
                if lru.touch(k, capacity, &mut evicted) {
                    added.push(k);
                }
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
    /// stopping at the first key nobody holds.
    pub fn match_counts(&self, keys: &[u64]) -> HashMap<EndpointId, usize> {
        let mut counts: HashMap<EndpointId, usize> = HashMap::new();
        for &k in keys {
            let map = self.reverse[shard(k)].read().unwrap_or_else(|p| p.into_inner());
            let Some(holders) = map.get(&k) else { break };
            for h in holders {
                *counts.entry(h.clone()).or_default() += 1;
            }
        }
        counts
    }

    /// Drops every endpoint not accepted by `keep`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let removed: Vec<(EndpointId, Vec<u64>)> = {
            let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
            let gone: Vec<EndpointId> = servers.keys().filter(|id| !keep(id)).cloned().collect();
            gone.into_iter()
                .filter_map(|id| servers.remove(&id).map(|lru| (id, lru.stamp_of.into_keys().collect())))
                .collect()
        };
        for (id, keys) in removed {
            for k in keys {
                self.unlink(k, &id);
            }
        }
    }

    /// Total (key, endpoint) entries.
    pub fn len(&self) -> usize {
        self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().map(|l| l.stamp_of.len()).sum()
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
        let c = idx.match_counts(&[1, 2, 3, 4]);
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
        assert_eq!(idx.match_counts(&[2, 3])[&a], 2);
    }

    #[test]
    fn retain_drops_departed_endpoints() {
        let idx = ApproxIndex::default();
        idx.add(&"a".into(), &[1], 10);
        idx.add(&"b".into(), &[1], 10);
        idx.retain(|id| id == "b");
        let c = idx.match_counts(&[1]);
        assert_eq!(c.len(), 1);
        assert!(c.contains_key("b"));
    }
}
