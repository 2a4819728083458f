//! Sharded prefix index: request key -> set of (endpoint, tier).
//!
//! Read API (`lookup`) and the primitives used by [`apply`]. Layout:
//! `shards` power-of-two tables (see [`table`]) each behind its own
//! `RwLock`; a key picks its shard from a mix of its bits. A lookup read-locks
//! each shard its keys fall in once (ascending order) and never waits for a
//! whole write batch; writers (one per endpoint, ordered by the subscriber's
//! worker shards) take one short write lock per key and never hold two.
//! There is no global lock on either path: the endpoint registry lock is
//! read-mostly and written only when an endpoint is added or removed.
//!
//! Memory: a key costs one 16-byte bucket at 40-80 % load and holds up to two
//! endpoints inline (4 bytes each); in request-key mode each source's engine
//! map adds one 8-byte bucket per engine block ([`engine_map`]); see
//! `docs/kvcache.md` for measurements.
//! Capacity is bounded per shard with random eviction.

mod apply;
mod buckets;
mod engine_map;
pub mod holder;
mod ref_table;
mod registry;
mod slab;
mod table;

pub use apply::{ApplyStats, EventOutcome};
pub use table::{AddMode, RemoveMode};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use dashmap::DashMap;

use self::engine_map::EngineMap;
use self::holder::EndpointId;
use self::registry::Registry;
use self::table::{RefMatch, Table, key_ref};
use super::events::Tier;
use super::hashing::VllmHasher;
use super::keys::RequestKeyer;

/// How index keys are derived from events.
#[derive(Debug, Clone)]
pub enum KeyMode {
    /// epp's own request keys computed from each event's `token_ids`
    /// (llm-d's current design); engine hashes are only mapped.
    Request {
        /// Key algorithm and seed.
        keyer: RequestKeyer,
        /// epp block size in tokens.
        block_size: usize,
    },
    /// The engine's hashes are the keys (vLLM's algorithm, seed and block size
    /// must be reproduced on the request side with [`VllmHasher`]).
    Engine {
        /// The request-side hasher matching vLLM's settings, when configured.
        hasher: Option<VllmHasher>,
        /// vLLM's block size in tokens.
        block_size: usize,
    },
}

/// Score weight per tier (llm-d `kvCacheBackendConfigs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierWeights(pub [f64; Tier::COUNT]);

impl Default for TierWeights {
    /// gpu 1.0, cpu 0.8; tiers llm-d does not name (speculative included) weigh 1.0.
    fn default() -> Self {
        TierWeights([1.0, 0.8, 1.0, 1.0, 1.0])
    }
}

impl TierWeights {
    /// Weight of a tier.
    pub fn of(&self, tier: Tier) -> f64 {
        self.0[usize::from(tier.id())]
    }
}

/// Index parameters.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Key derivation.
    pub key_mode: KeyMode,
    /// Maximum keys held (across shards); beyond it keys are evicted.
    pub capacity: usize,
    /// Number of shards (rounded up to a power of two).
    pub shards: usize,
    /// Tier weights for scoring.
    pub tier_weights: TierWeights,
    /// Maximum engine-hash mappings per source (request-key mode).
    pub engine_map_capacity: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 16 },
            capacity: 16 << 20,
            shards: 16,
            tier_weights: TierWeights::default(),
            engine_map_capacity: 4 << 20,
        }
    }
}

/// One endpoint's match for a lookup.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointMatch {
    /// Endpoint name.
    pub endpoint: Arc<str>,
    /// Longest run of consecutive keys from the first held (any tier).
    pub blocks: usize,
    /// Sum over that run of the best tier weight per block.
    pub weighted: f64,
}

/// How many keys ahead a lookup prefetches a key's bucket.
const BUCKET_AHEAD: usize = 32;
/// How many keys ahead a lookup reads a key's slot (its bucket prefetched
/// `BUCKET_AHEAD - SLOT_AHEAD` keys earlier) and prefetches its overflow list.
const SLOT_AHEAD: usize = 16;

/// One lock shard.
#[derive(Debug)]
struct Shard {
    table: RwLock<Table>,
}

/// Most lock shards (a lookup keeps one guard slot per shard).
const MAX_SHARDS: usize = 1 << 10;
const _: () = assert!(MAX_SHARDS.is_multiple_of(64));

/// One endpoint's run during a lookup.
struct Run {
    ep: EndpointId,
    blocks: usize,
    weighted: f64,
    /// Best tier weight at the current block, -1 when absent.
    best: f64,
}

/// The lookup loop over locked tables (`tables[i]` holds `keys[i]`).
fn longest_runs(keys: &[u64], tables: &[&Table], w: &TierWeights) -> Vec<Run> {
    let n = keys.len().min(tables.len());
    let mut runs: Vec<Run> = Vec::new();
    // Endpoint id -> 1 + index in `runs` (0 = not a candidate); ids are
    // dense, so this stays small and makes each holder O(1).
    let mut slot_of_ep: Vec<u32> = Vec::new();
    // Slots read SLOT_AHEAD keys early, in a ring.
    let mut ring = [0u64; SLOT_AHEAD];
    let stage_slot = |i: usize, ring: &mut [u64; SLOT_AHEAD]| {
        let slot = tables[i].slot_of(keys[i]);
        tables[i].prefetch_overflow(slot);
        ring[i % SLOT_AHEAD] = slot;
    };
    for i in 0..n.min(BUCKET_AHEAD) {
        tables[i].prefetch_bucket(keys[i]);
    }
    for i in 0..n.min(SLOT_AHEAD) {
        stage_slot(i, &mut ring);
    }
    for i in 0..n {
        let slot = ring[i % SLOT_AHEAD];
        if i + BUCKET_AHEAD < n {
            tables[i + BUCKET_AHEAD].prefetch_bucket(keys[i + BUCKET_AHEAD]);
        }
        if i + SLOT_AHEAD < n {
            stage_slot(i + SLOT_AHEAD, &mut ring);
        }
        tables[i].for_each_in_slot(slot, |h| {
            let ep = holder::endpoint(h);
            let weight = w.of(Tier::from_id(holder::tier(h)));
            let e = usize::from(ep);
            if e >= slot_of_ep.len() {
                if i > 0 {
                    return;
                }
                slot_of_ep.resize(e + 1, 0);
            }
            match slot_of_ep[e] {
                0 if i == 0 => {
                    runs.push(Run { ep, blocks: 0, weighted: 0.0, best: weight });
                    slot_of_ep[e] = runs.len() as u32;
                }
                0 => {}
                s => {
                    let r = &mut runs[s as usize - 1];
                    r.best = r.best.max(weight);
                }
            }
        });
        let mut alive = 0;
        for r in &mut runs {
            // Alive at block i iff it matched every earlier block.
            if r.best >= 0.0 && r.blocks == i {
                r.blocks += 1;
                r.weighted += r.best;
                alive += 1;
            }
            r.best = -1.0;
        }
        if alive == 0 {
            break;
        }
    }
    runs
}

/// The prefix index. `Send + Sync`; share as `Arc<PrefixIndex>`.
#[derive(Debug)]
pub struct PrefixIndex {
    shards: Box<[Shard]>,
    shard_mask: usize,
    registry: RwLock<Registry>,
    engine_maps: DashMap<(EndpointId, u32), EngineMap>,
    ambiguous_refs: AtomicU64,
    config: IndexConfig,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

impl PrefixIndex {
    /// An empty index.
    pub fn new(config: IndexConfig) -> Self {
        let n = config.shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let per_shard = config.capacity.div_ceil(n).max(1);
        let shards =
            (0..n).map(|i| Shard { table: RwLock::new(Table::new(per_shard, 0x9E37_79B9 ^ (i as u64 + 1))) }).collect();
        PrefixIndex {
            shards,
            shard_mask: n - 1,
            registry: RwLock::new(Registry::default()),
            engine_maps: DashMap::new(),
            ambiguous_refs: AtomicU64::new(0),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    fn shard_index(&self, key: u64) -> usize {
        self.shard_of_ref(key_ref(key))
    }

    /// The shard of every key with reference `kref`: its low bits, which are
    /// independent of the in-table position (the top bits of the same product)
    /// while a shard has fewer than `2^(32 - log2 shards)` buckets.
    fn shard_of_ref(&self, kref: u32) -> usize {
        kref as usize & self.shard_mask
    }

    fn shard(&self, key: u64) -> &Shard {
        &self.shards[self.shard_index(key)]
    }

    /// Adds one holder.
    fn add_key(&self, key: u64, ep: EndpointId, tier: u8, mode: AddMode) {
        write(&self.shard(key).table).add(key, ep, tier, mode);
    }

    /// The key with reference `kref` that `(ep, tier)` holds, when exactly one
    /// does (an ambiguous reference is counted and resolves to nothing).
    fn resolve_ref(&self, kref: u32, ep: EndpointId, tier: u8) -> Option<u64> {
        match read(&self.shards[self.shard_of_ref(kref)].table).resolve_ref(kref, ep, tier) {
            RefMatch::One(k) => Some(k),
            RefMatch::None => None,
            RefMatch::Ambiguous => {
                self.ambiguous_refs.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Drops one reference of `(ep, tier)` from the key(s) with reference `kref`.
    fn release_ref(&self, kref: u32, ep: EndpointId, tier: u8) {
        if write(&self.shards[self.shard_of_ref(kref)].table).release_ref(kref, ep, tier) > 1 {
            self.ambiguous_refs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds `(endpoint, tier)` to each key (the bench and engine-key paths).
    pub fn store_keys(&self, endpoint: &str, tier: Tier, keys: &[u64], mode: AddMode) {
        self.with_endpoint(endpoint, |ep| {
            for k in keys {
                self.add_key(*k, ep, tier.id(), mode);
            }
        });
    }

    /// Removes `(endpoint, tier)` from each key.
    pub fn remove_keys(&self, endpoint: &str, tier: Tier, keys: &[u64], mode: RemoveMode) {
        let reg = read(&self.registry);
        let Some(ep) = reg.id(endpoint) else { return };
        for k in keys {
            write(&self.shard(*k).table).remove(*k, ep, tier.id(), mode);
        }
    }

    /// Runs `f` with the endpoint's id while holding the registry read lock,
    /// so a concurrent `remove_endpoint` cannot recycle the id under `f`.
    /// Returns `None` when the endpoint table is full.
    fn with_endpoint<R>(&self, endpoint: &str, f: impl FnOnce(EndpointId) -> R) -> Option<R> {
        loop {
            {
                let reg = read(&self.registry);
                if let Some(id) = reg.id(endpoint) {
                    return Some(f(id));
                }
            }
            write(&self.registry).intern(endpoint)?;
        }
    }

    /// Forgets every entry of `endpoint` (all tiers) and its engine maps,
    /// keeping the endpoint registered (`AllBlocksCleared`, restarts, gaps).
    pub fn clear_endpoint(&self, endpoint: &str) -> usize {
        self.with_endpoint(endpoint, |ep| self.purge(ep)).unwrap_or(0)
    }

    fn purge(&self, ep: EndpointId) -> usize {
        self.engine_maps.retain(|(e, _), _| *e != ep);
        self.shards.iter().map(|s| write(&s.table).remove_endpoint(ep)).sum()
    }

    /// Removes `endpoint` entirely (it left the pool); its id is reused later.
    pub fn remove_endpoint(&self, endpoint: &str) -> usize {
        // Retiring under the write lock waits for in-flight batches of this
        // endpoint; later batches intern a fresh id, so purging can run unlocked.
        let Some(id) = write(&self.registry).retire(endpoint) else { return 0 };
        let n = self.purge(id);
        write(&self.registry).release(id);
        n
    }

    /// Per endpoint, the longest run of consecutive `keys` held from the first,
    /// with the tier-weighted score. Endpoints with no match are omitted.
    ///
    /// Block 0 is checked under its own shard lock first (a miss costs one
    /// lock). Otherwise every shard the keys fall in is read-locked once, in
    /// ascending order: writers hold one shard lock at a time, so the order
    /// cannot deadlock, and a writer waits at most one lookup (microseconds).
    /// Holding the tables lets the loop run a two-stage software pipeline:
    /// the bucket of key `i + 32` is prefetched, the slot of key `i + 16` is read
    /// and its overflow list prefetched, and key `i` is then served from cache.
    pub fn lookup(&self, keys: &[u64]) -> Vec<EndpointMatch> {
        let Some(first) = keys.first() else { return Vec::new() };
        if read(&self.shard(*first).table).slot_of(*first) == 0 {
            return Vec::new();
        }
        let shard_of: Vec<usize> = keys.iter().map(|k| self.shard_index(*k)).collect();
        let mut wanted = [0u64; MAX_SHARDS / 64];
        for s in &shard_of {
            wanted[s / 64] |= 1 << (s % 64);
        }
        let mut guards: Vec<Option<RwLockReadGuard<'_, Table>>> = Vec::with_capacity(self.shards.len());
        for (s, shard) in self.shards.iter().enumerate() {
            // Ascending shard order.
            guards.push((wanted[s / 64] >> (s % 64) & 1 == 1).then(|| read(&shard.table)));
        }
        let tables: Vec<&Table> = shard_of.iter().filter_map(|s| guards[*s].as_deref()).collect();
        let runs = longest_runs(keys, &tables, &self.config.tier_weights);
        drop(tables);
        drop(guards);
        let reg = read(&self.registry);
        runs.into_iter()
            .filter(|r| r.blocks > 0)
            .filter_map(|r| {
                reg.name(r.ep).map(|n| EndpointMatch { endpoint: n.clone(), blocks: r.blocks, weighted: r.weighted })
            })
            .collect()
    }

    /// Number of `(key, endpoint, tier)` entries.
    pub fn entries(&self) -> usize {
        self.shards.iter().map(|s| read(&s.table).entries()).sum()
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> usize {
        self.shards.iter().map(|s| read(&s.table).keys()).sum()
    }

    /// Keys evicted for capacity so far.
    pub fn evictions(&self) -> u64 {
        self.shards.iter().map(|s| read(&s.table).evictions()).sum()
    }

    /// Approximate heap bytes of the key tables.
    pub fn table_bytes(&self) -> usize {
        self.shards.iter().map(|s| read(&s.table).bytes()).sum()
    }

    /// Approximate heap bytes including engine maps.
    pub fn approx_bytes(&self) -> usize {
        self.table_bytes() + self.engine_maps.iter().map(|m| m.bytes()).sum::<usize>()
    }

    /// Engine-hash mappings held (request-key mode).
    pub fn engine_mappings(&self) -> usize {
        self.engine_maps.iter().map(|m| m.len()).sum()
    }

    /// Engine-map key references that matched several keys held by the same
    /// source (request-key mode; each such release dropped all of them, each
    /// such parent was treated as unknown).
    pub fn ambiguous_refs(&self) -> u64 {
        self.ambiguous_refs.load(Ordering::Relaxed)
    }

    /// Keys (blocks) each registered endpoint holds in any tier, 0 for one that holds none.
    /// One pass over every shard, each under its read lock in turn (a writer waits at most
    /// one shard's pass).
    pub fn blocks_by_endpoint(&self) -> Vec<(Arc<str>, u64)> {
        let mut blocks = Vec::new();
        for shard in self.shards.iter() {
            read(&shard.table).count_keys_by_endpoint(&mut blocks);
        }
        read(&self.registry)
            .live()
            .map(|(id, name)| (name.clone(), blocks.get(usize::from(id)).copied().unwrap_or(0)))
            .collect()
    }

    /// Registered endpoints.
    pub fn endpoints(&self) -> usize {
        read(&self.registry).len()
    }
}

#[cfg(test)]
mod tests;
