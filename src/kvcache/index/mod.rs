//! Sharded prefix index: request key -> set of (endpoint, tier).
//!
//! Read API (`lookup`) and the primitives used by [`apply`]. Layout:
//! `shards` power-of-two tables (see [`table`]) each behind its own
//! `RwLock`; a key picks its shard from a mix of its bits. A lookup read-locks
//! each shard its keys fall in once (ascending order) and never waits for a
//! whole write batch; writers (one per endpoint, ordered by the subscriber's
//! worker shards) take one short write lock per shard an event touches
//! ([`batch`]) and never hold two.
//! There is no global lock on either path: the endpoint registry lock is
//! read-mostly and written only when an endpoint is added or removed.
//!
//! Memory: a key costs one 16-byte bucket at 40-80 % load and holds up to two
//! endpoints inline (4 bytes each); in request-key mode each source's engine
//! map adds one 8-byte bucket per engine block ([`engine_map`]); see
//! `docs/kvcache.md` for measurements.
//! Capacity is bounded per shard with random eviction.

mod apply;
mod batch;
mod buckets;
mod engine_map;
pub mod holder;
mod ref_table;
mod registry;
mod runs;
mod slab;
mod table;

pub use apply::{ApplyStats, EventOutcome};
pub(crate) use apply::{is_unsupported_kind, realign_extras, span_error};
pub use table::{AddMode, RemoveMode};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use dashmap::DashMap;
use smallvec::SmallVec;

use self::engine_map::EngineMap;
use self::holder::EndpointId;
use self::registry::Registry;
use self::table::{KeyRef, RefMatch, Table, TableView, key_order, ref_order, shard_of};
use super::events::Tier;
use super::hashing::VllmHasher;
use super::keys::{RequestKeyAlgo, RequestKeyer};

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
            key_mode: KeyMode::Request { keyer: RequestKeyer::new(RequestKeyAlgo::CborFnv, ""), block_size: 16 },
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
    /// Sum over that run of the best tier weight per block, computed as
    /// `Σ_tier blocks(tier) · weight(tier)` (best tier: highest weight, lowest
    /// tier id among equals).
    pub weighted: f64,
}

/// One lock shard.
#[derive(Debug)]
struct Shard {
    table: RwLock<Table>,
}

/// Most lock shards (a lookup keeps one guard slot per shard).
const MAX_SHARDS: usize = 1 << 10;
const _: () = assert!(MAX_SHARDS.is_multiple_of(64));

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
        self.shard_of_order(key_order(key))
    }

    /// The shard of every key of order `order` (see [`table::shard_of`]).
    fn shard_of_order(&self, order: u32) -> usize {
        shard_of(order, self.shard_mask)
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
    fn resolve_ref(&self, kref: KeyRef, ep: EndpointId, tier: u8) -> Option<u64> {
        match read(&self.shards[self.shard_of_order(ref_order(kref))].table).resolve_ref(kref, ep, tier) {
            RefMatch::One(k) => Some(k),
            RefMatch::None => None,
            RefMatch::Ambiguous => {
                self.ambiguous_refs.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Adds `(endpoint, tier)` to each key (the bench and engine-key paths).
    pub fn store_keys(&self, endpoint: &str, tier: Tier, keys: &[u64], mode: AddMode) {
        self.with_endpoint(endpoint, |ep| self.add_batch(keys, ep, tier.id(), mode));
    }

    /// Removes `(endpoint, tier)` from each key.
    pub fn remove_keys(&self, endpoint: &str, tier: Tier, keys: &[u64], mode: RemoveMode) {
        let reg = read(&self.registry);
        let Some(ep) = reg.id(endpoint) else { return };
        self.remove_batch(keys, ep, tier.id(), mode);
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
    /// lock). Otherwise the registry is read-locked, then every shard the keys
    /// fall in, once each in ascending order: writers hold one shard lock at a
    /// time (under a registry read lock at most), so the order cannot
    /// deadlock, and a writer waits at most one lookup (microseconds).
    /// Holding the tables lets the loop in [`runs`] prefetch ahead and skip the
    /// holders of a key that has those of the key before it.
    pub fn lookup(&self, keys: &[u64]) -> Vec<EndpointMatch> {
        let Some(first) = keys.first() else { return Vec::new() };
        if read(&self.shard(*first).table).slot_of(*first) == 0 {
            return Vec::new();
        }
        // The shard of a key is a multiply and a mask: computed twice rather than kept.
        // With four keys or more per shard nearly every shard is hit (each is
        // missed with odds under (1 - 1/n)^4n < 2 %): lock them all uncounted.
        let mut wanted = [0u64; MAX_SHARDS / 64];
        if keys.len() >= 4 * self.shards.len() {
            wanted.fill(u64::MAX);
        } else {
            for k in keys {
                let s = self.shard_index(*k);
                wanted[s / 64] |= 1 << (s % 64);
            }
        }
        let reg = read(&self.registry);
        let wants = |s: usize| wanted[s / 64] >> (s % 64) & 1 == 1;
        // Inline up to the default 16 shards: no allocation per lookup.
        let mut guards: SmallVec<[RwLockReadGuard<'_, Table>; 16]> = SmallVec::new();
        for (s, shard) in self.shards.iter().enumerate() {
            if wants(s) {
                guards.push(read(&shard.table));
            }
        }
        // Per shard the view of its locked table; shards no key falls in get any locked one (never read).
        let Some(any) = guards.first() else { return Vec::new() };
        let (mut locked, any) = (guards.iter(), any.view());
        let mut views: SmallVec<[TableView<'_>; 16]> = SmallVec::new();
        for s in 0..self.shards.len() {
            views.push(if wants(s) { locked.next().map_or(any, |g| g.view()) } else { any });
        }
        runs::longest_runs(keys, &views, self.shard_mask, &self.config.tier_weights, |runs| {
            // Picked first, then written with one exactly sized `extend` over a slice, which
            // stores each match straight into the result: the pushes of a filtered iterator
            // built each match on the stack and read it back in 16-byte halves, stalling on
            // store-to-load forwarding twice per match (perf, 2026-12-07).
            let picked: SmallVec<[(&Arc<str>, usize, f64); 64]> = (runs.iter().filter(|r| r.blocks > 0))
                .filter_map(|r| Some((reg.name(r.ep)?, r.blocks, r.weighted)))
                .collect();
            let mut out = Vec::with_capacity(picked.len());
            out.extend(picked.iter().map(|&(name, blocks, weighted)| EndpointMatch {
                endpoint: name.clone(),
                blocks,
                weighted,
            }));
            out
        })
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
