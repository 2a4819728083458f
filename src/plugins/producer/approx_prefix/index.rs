//! The routing-history index of the approximate producer: per endpoint an LRU set of block
//! keys bounded by a capacity, and a sharded reverse map key -> endpoints holding it.
//! Eviction from an endpoint's LRU removes it from the reverse map. Locks are short and
//! never nested in the opposite order (endpoint LRU, then reverse-map shard).

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use crate::endpoints::model::EndpointId;
use crate::kvcache::index::MixState;

const SHARDS: usize = 32;

/// No node.
const NIL: u32 = u32::MAX;

/// One key of an [`Lru`], linked from more to less recent.
#[derive(Debug, Clone, Copy)]
struct Node {
    key: u64,
    newer: u32,
    older: u32,
}

/// Recency-ordered set of keys with a capacity: a key -> node map over a doubly linked list
/// kept in a vector (freed nodes reused), so a touch is one hash probe and a few stores.
/// Keys are XXH64 block hashes already: the map hashes them with one multiply.
#[derive(Debug)]
struct Lru {
    node_of: HashMap<u64, u32, MixState>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
}

impl Default for Lru {
    fn default() -> Self {
        Self { node_of: HashMap::default(), nodes: Vec::new(), free: Vec::new(), newest: NIL, oldest: NIL }
    }
}

impl Lru {
    fn len(&self) -> usize {
        self.node_of.len()
    }

    fn unlink(&mut self, i: u32) {
        let Node { newer, older, .. } = self.nodes[i as usize];
        match newer {
            NIL => self.newest = older,
            n => self.nodes[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, i: u32) {
        let old_newest = self.newest;
        self.nodes[i as usize].newer = NIL;
        self.nodes[i as usize].older = old_newest;
        match old_newest {
            NIL => self.oldest = i,
            n => self.nodes[n as usize].newer = i,
        }
        self.newest = i;
    }

    /// Touches `key` (true when it was not held); pushes the keys evicted to stay within
    /// `capacity` onto `evicted`.
    fn touch(&mut self, key: u64, capacity: usize, evicted: &mut Vec<u64>) -> bool {
        if let Some(&i) = self.node_of.get(&key) {
            if self.newest != i {
                self.unlink(i);
                self.push_newest(i);
            }
            return false;
        }
        let node = Node { key, newer: NIL, older: NIL };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.node_of.insert(key, i);
        self.push_newest(i);
        while self.node_of.len() > capacity.max(1) {
            let oldest = self.oldest;
            if oldest == NIL {
                break;
            }
            self.unlink(oldest);
            let gone = self.nodes[oldest as usize].key;
            self.node_of.remove(&gone);
            self.free.push(oldest);
            evicted.push(gone);
        }
        true
    }

    fn into_keys(self) -> impl Iterator<Item = u64> {
        self.node_of.into_keys()
    }
}

/// The index.
#[derive(Debug)]
pub struct ApproxIndex {
    servers: Mutex<HashMap<EndpointId, Lru>>,
    reverse: Vec<RwLock<HashMap<u64, Vec<EndpointId>, MixState>>>,
}

impl Default for ApproxIndex {
    fn default() -> Self {
        Self {
            servers: Mutex::new(HashMap::new()),
            reverse: (0..SHARDS).map(|_| RwLock::new(HashMap::default())).collect(),
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
            gone.into_iter().filter_map(|id| servers.remove(&id).map(|lru| (id, lru.into_keys().collect()))).collect()
        };
        for (id, keys) in removed {
            for k in keys {
                self.unlink(k, &id);
            }
        }
    }

    /// Total (key, endpoint) entries.
    pub fn len(&self) -> usize {
        self.servers.lock().unwrap_or_else(|p| p.into_inner()).values().map(Lru::len).sum()
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
    fn a_touch_makes_a_key_most_recent_and_freed_nodes_are_reused() {
        let mut lru = Lru::default();
        let mut evicted = Vec::new();
        for k in [1, 2, 3] {
            assert!(lru.touch(k, 3, &mut evicted));
        }
        assert!(!lru.touch(1, 3, &mut evicted), "held already");
        assert!(lru.touch(4, 3, &mut evicted));
        assert_eq!(evicted, vec![2], "2 was the least recent once 1 was touched");
        assert!(lru.touch(5, 2, &mut evicted));
        assert_eq!(evicted, vec![2, 3, 1]);
        assert_eq!((lru.len(), lru.nodes.len()), (2, 4), "freed nodes reused");
        assert!(!lru.touch(4, 2, &mut evicted) && !lru.touch(5, 2, &mut evicted));
        assert!(lru.touch(6, 1, &mut evicted));
        assert_eq!(evicted, vec![2, 3, 1, 4, 5]);
        assert_eq!((lru.newest, lru.oldest), (lru.node_of[&6], lru.node_of[&6]));
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
