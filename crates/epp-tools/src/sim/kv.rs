//! The KV block pool of one simulated pod, shaped like vLLM's prefix cache: full blocks are
//! identified by a hash chained over their tokens; a block is referenced by every running
//! request using it; blocks whose last reference is dropped stay cached in an LRU free queue
//! and are evicted (least recently freed first) only when a new block needs the room.
//! Every store and eviction is recorded as a KV event (`BlockStored` with the parent hash and
//! the block's token ids, `BlockRemoved`) for the current step's batch.
//!
//! Does not model partial blocks, tiers or preemption: admission reserves the whole request
//! up front (see `pod`), so the pool never runs dry.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use epp::kvcache::events::{BlockRemoved, BlockStored, KvEvent};

/// Seed of the first block's hash (vLLM's `NONE_HASH` plays this role).
const ROOT_SEED: u64 = 0x005E_ED0F_B10C;

/// Hash of a full block given its parent's hash (`None` for the first block).
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let seed = parent.unwrap_or(ROOT_SEED);
    // Blocks of up to 64 tokens (the usual sizes) are hashed from the stack.
    let mut stack = [0u8; 256];
    if tokens.len() * 4 <= stack.len() {
        for (dst, t) in stack.chunks_exact_mut(4).zip(tokens) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        return xxhash_rust::xxh3::xxh3_64_with_seed(&stack[..tokens.len() * 4], seed);
    }
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed)
}

/// Hashes of the full blocks of `tokens`, in prefix order.
pub fn chain(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut parent = None;
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            let h = block_hash(parent, block);
            parent = Some(h);
            h
        })
        .collect()
}

/// Block hashes are already uniform 64-bit values: the map uses them as they are instead of
/// hashing them again with SipHash (a hot spot at 1,000 pods).
#[derive(Default)]
struct HashKey(u64);

impl Hasher for HashKey {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
struct Block {
    refs: u32,
    /// Key in the free queue while `refs == 0`.
    free_stamp: Option<u64>,
}

/// One pod's block pool.
#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    capacity: usize,
    blocks: HashMap<u64, Block, BuildHasherDefault<HashKey>>,
    /// Free (cached, unreferenced) blocks by the time they were freed: the LRU order.
    free: BTreeMap<u64, u64>,
    stamp: u64,
    in_use: usize,
    events: Vec<KvEvent>,
    /// Whether stores and evictions are recorded as events (off when nobody reads them).
    records_events: bool,
    evictions: u64,
}

impl BlockPool {
    /// An empty pool of `capacity` blocks of `block_size` tokens.
    pub fn new(block_size: usize, capacity: usize) -> Self {
        Self {
            block_size,
            capacity,
            blocks: HashMap::default(),
            free: BTreeMap::new(),
            stamp: 0,
            in_use: 0,
            events: Vec::new(),
            records_events: true,
            evictions: 0,
        }
    }

    /// Capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Blocks referenced by running requests.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Number of leading `hashes` cached (in use or free).
    pub fn cached_prefix(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.blocks.contains_key(h)).count()
    }

    /// Of the first `n` hashes (all cached), how many are currently unreferenced: taking
    /// them moves them from the free queue into use.
    pub fn free_among(&self, hashes: &[u64]) -> usize {
        hashes.iter().filter(|h| self.blocks.get(*h).is_some_and(|b| b.refs == 0)).count()
    }

    /// Adds a reference to a cached block; false when it is not cached.
    pub fn acquire(&mut self, hash: u64) -> bool {
        let Some(block) = self.blocks.get_mut(&hash) else { return false };
        if block.refs == 0 {
            if let Some(stamp) = block.free_stamp.take() {
                self.free.remove(&stamp);
            }
            self.in_use += 1;
        }
        block.refs += 1;
        true
    }

    /// Stores a newly computed full block (or references it when another request computed
    /// the same block meanwhile), evicting the least recently freed block when full. Returns
    /// false when there was no room (cannot happen while admission reserves).
    pub fn store(&mut self, hash: u64, parent: Option<u64>, tokens: &[u32]) -> bool {
        if self.acquire(hash) {
            return true;
        }
        if self.blocks.len() >= self.capacity && !self.evict_one() {
            return false;
        }
        self.blocks.insert(hash, Block { refs: 1, free_stamp: None });
        self.in_use += 1;
        self.push_stored(hash, parent, tokens);
        true
    }

    /// Drops one reference from each block, last block first (so a request's tail is
    /// evicted before its prefix, as vLLM frees blocks in reverse order).
    pub fn release(&mut self, hashes: &[u64]) {
        for hash in hashes.iter().rev() {
            let Some(block) = self.blocks.get_mut(hash) else { continue };
            block.refs = block.refs.saturating_sub(1);
            if block.refs == 0 && block.free_stamp.is_none() {
                self.stamp += 1;
                block.free_stamp = Some(self.stamp);
                self.free.insert(self.stamp, *hash);
                self.in_use = self.in_use.saturating_sub(1);
            }
        }
    }

    /// Turns event recording on or off (on by default).
    pub fn set_records_events(&mut self, on: bool) {
        self.records_events = on;
    }

    /// Whether stores and evictions are recorded as events.
    pub fn records_events(&self) -> bool {
        self.records_events
    }

    /// The events since the last call, in the order they happened.
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }

    fn evict_one(&mut self) -> bool {
        let Some((_, hash)) = self.free.pop_first() else { return false };
        self.blocks.remove(&hash);
        self.evictions += 1;
        if !self.records_events {
            return true;
        }
        if let Some(KvEvent::BlockRemoved(r)) = self.events.last_mut() {
            r.block_hashes.push(hash);
        } else {
            self.events.push(KvEvent::BlockRemoved(BlockRemoved { block_hashes: vec![hash], ..Default::default() }));
        }
        true
    }

    fn push_stored(&mut self, hash: u64, parent: Option<u64>, tokens: &[u32]) {
        if !self.records_events {
            return;
        }
        // Extend the previous event when this block continues its run.
        if let Some(KvEvent::BlockStored(s)) = self.events.last_mut()
            && parent.is_some()
            && s.block_hashes.last().copied() == parent
        {
            s.block_hashes.push(hash);
            s.token_ids.extend_from_slice(tokens);
            return;
        }
        self.events.push(KvEvent::BlockStored(BlockStored {
            block_hashes: vec![hash],
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: self.block_size as u32,
            ..Default::default()
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_blocks_stay_cached_until_evicted_lru_first() {
        let mut pool = BlockPool::new(2, 3);
        let a = chain(&[1, 2, 3, 4], 2);
        assert!(pool.store(a[0], None, &[1, 2]));
        assert!(pool.store(a[1], Some(a[0]), &[3, 4]));
        pool.release(&a);
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.cached_prefix(&a), 2);
        let b = chain(&[9, 9, 8, 8], 2);
        assert!(pool.store(b[0], None, &[9, 9]));
        assert!(pool.store(b[1], Some(b[0]), &[8, 8]));
        // The tail of `a` was freed first, so it went first; its head survives.
        assert_eq!(pool.cached_prefix(&a), 1);
        let events = pool.take_events();
        let stored: usize = events
            .iter()
            .map(|e| match e {
                KvEvent::BlockStored(s) => s.block_hashes.len(),
                _ => 0,
            })
            .sum();
        let removed: Vec<u64> = events
            .iter()
            .flat_map(|e| match e {
                KvEvent::BlockRemoved(r) => r.block_hashes.clone(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(stored, 4);
        assert_eq!(removed, vec![a[1]]);
    }

    #[test]
    fn referenced_blocks_are_never_evicted() {
        let mut pool = BlockPool::new(1, 1);
        assert!(pool.store(7, None, &[7]));
        assert!(!pool.store(8, None, &[8]));
        assert!(pool.acquire(7));
        pool.release(&[7]);
        pool.release(&[7]);
        assert!(pool.store(8, None, &[8]));
        assert_eq!(pool.evictions(), 1);
    }
}
