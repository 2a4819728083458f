//! Applying decoded events of one endpoint to the index.
//!
//! Request-key mode (default): a `BlockStored` is re-keyed from its
//! `token_ids` — parent request key = the last request key mapped from
//! `parent_block_hash` (or the model root when nil; the LoRA name replaces
//! the topic model), request keys = chain over epp-sized full blocks with the
//! event's extra keys realigned — and each engine hash is mapped to request
//! keys proportionally (reference §8). Each (engine hash, tier) newly held
//! adds one reference to its request keys; `BlockRemoved` drops it, so a key
//! stays held while any engine block (any DP rank or group) still maps to it.
//! An unknown parent drops the event (it cannot be chained). A store with no
//! tokens but known hashes is a tier move. Engine-key mode indexes the
//! hashes themselves with idempotent set semantics.
//!
//! Filters before keying: unsupported `kv_cache_spec_kind` (sliding window,
//! mamba …), `block_size` 0, and spans whose tokens do not fill exactly one
//! block per hash.

use super::engine_map::EngineMap;
use super::holder::EndpointId;
use super::table::{AddMode, KeyRef, RemoveMode, key_ref};
use super::{KeyMode, PrefixIndex};
use crate::kvcache::events::{BlockRemoved, BlockStored, EventBatch, EventKind, ExtraKey, KvEvent};
use crate::kvcache::keys::align_blocks;

/// What happened to one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// Applied to the index.
    Applied,
    /// `BlockStored` whose parent hash is not mapped: cannot be chained.
    UnknownParent,
    /// KV-cache kind that prefix routing cannot use.
    UnsupportedKind,
    /// `block_size` 0.
    InvalidBlockSize,
    /// Token count does not match `block_size × len(block_hashes)`.
    NonDenseSpan,
    /// Tier move or removal of hashes never seen stored.
    UnknownBlock,
    /// No endpoint id left.
    EndpointLimit,
    /// The shared (Redis) index could not be read or written; the event is lost to it.
    BackendError,
}

impl EventOutcome {
    /// Number of outcomes.
    pub const COUNT: usize = 8;
    /// All outcomes, in id order.
    pub const ALL: [EventOutcome; 8] = [
        EventOutcome::Applied,
        EventOutcome::UnknownParent,
        EventOutcome::UnsupportedKind,
        EventOutcome::InvalidBlockSize,
        EventOutcome::NonDenseSpan,
        EventOutcome::UnknownBlock,
        EventOutcome::EndpointLimit,
        EventOutcome::BackendError,
    ];

    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Applied => "applied",
            EventOutcome::UnknownParent => "unknown_parent",
            EventOutcome::UnsupportedKind => "unsupported_cache_kind",
            EventOutcome::InvalidBlockSize => "invalid_block_size",
            EventOutcome::NonDenseSpan => "non_dense_block_span",
            EventOutcome::UnknownBlock => "unknown_block",
            EventOutcome::EndpointLimit => "endpoint_limit",
            EventOutcome::BackendError => "backend_error",
        }
    }
}

/// Counts of one `apply` call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// `[kind][outcome]` event counts (kinds: stored, removed, cleared).
    pub events: [[u32; EventOutcome::COUNT]; 3],
    /// Engine blocks stored.
    pub stored_blocks: u64,
    /// Engine blocks removed.
    pub removed_blocks: u64,
}

impl ApplyStats {
    fn kind_idx(kind: EventKind) -> usize {
        match kind {
            EventKind::Stored => 0,
            EventKind::Removed => 1,
            _ => 2,
        }
    }

    /// Counts one event of `kind` with `outcome`.
    pub fn record(&mut self, kind: EventKind, outcome: EventOutcome) {
        self.events[Self::kind_idx(kind)][outcome as usize] += 1;
    }

    /// Count of events of `kind` with `outcome`.
    pub fn count(&self, kind: EventKind, outcome: EventOutcome) -> u32 {
        self.events[Self::kind_idx(kind)][outcome as usize]
    }
}

/// How many engine blocks ahead a store prefetches the engine-map bucket.
const MAP_AHEAD: usize = 8;

const SUPPORTED_KINDS: [&str; 3] = ["full_attention", "mla_attention", "sink_full_attention"];

/// True when the store's KV-cache kind cannot serve prefix routing (sliding window, mamba …).
pub(crate) fn is_unsupported_kind(s: &BlockStored) -> bool {
    s.kv_cache_spec_kind.as_deref().is_some_and(|k| !SUPPORTED_KINDS.contains(&k))
}

/// Why a store with tokens cannot be keyed: `block_size` 0, or tokens that do not fill
/// exactly one block per hash.
pub(crate) fn span_error(s: &BlockStored) -> Option<EventOutcome> {
    let bs = s.block_size as usize;
    if bs == 0 {
        return Some(EventOutcome::InvalidBlockSize);
    }
    if !s.token_ids.len().is_multiple_of(bs) || s.token_ids.len() / bs != s.block_hashes.len() {
        return Some(EventOutcome::NonDenseSpan);
    }
    None
}

impl PrefixIndex {
    /// Applies one batch published by `endpoint` in order. `model` is the
    /// topic's model name (used for the root key unless an event names a LoRA).
    pub fn apply(&self, endpoint: &str, model: &str, batch: &EventBatch) -> ApplyStats {
        let mut stats = ApplyStats::default();
        let rank = batch.data_parallel_rank.unwrap_or(0);
        let done = self.with_endpoint(endpoint, |ep| {
            for ev in &batch.events {
                let outcome = match ev {
                    KvEvent::BlockStored(s) => self.apply_stored(ep, rank, model, s, &mut stats),
                    KvEvent::BlockRemoved(r) => self.apply_removed(ep, rank, r, &mut stats),
                    KvEvent::AllBlocksCleared => {
                        self.purge(ep);
                        EventOutcome::Applied
                    }
                };
                stats.record(ev.kind(), outcome);
            }
        });
        if done.is_none() {
            for ev in &batch.events {
                stats.record(ev.kind(), EventOutcome::EndpointLimit);
            }
        }
        stats
    }

    fn add(&self, key: u64, ep: EndpointId, tier: u8, mode: AddMode) {
        self.add_key(key, ep, tier, mode);
    }

    fn apply_stored(
        &self,
        ep: EndpointId,
        rank: u32,
        model: &str,
        s: &BlockStored,
        stats: &mut ApplyStats,
    ) -> EventOutcome {
        if is_unsupported_kind(s) {
            return EventOutcome::UnsupportedKind;
        }
        let tier = s.tier().id();
        let (keyer, block_size) = match &self.config.key_mode {
            KeyMode::Engine { .. } => {
                self.add_batch(&s.block_hashes, ep, tier, AddMode::Set);
                stats.stored_blocks += s.block_hashes.len() as u64;
                return EventOutcome::Applied;
            }
            KeyMode::Request { keyer, block_size } => (keyer, *block_size),
        };
        let cap = self.config.engine_map_capacity;
        let mut map = self.engine_maps.entry((ep, rank)).or_default();
        if s.token_ids.is_empty() && !s.block_hashes.is_empty() {
            // Tier move (e.g. GPU -> CPU offload): resolve known hashes.
            let mut any = false;
            for h in &s.block_hashes {
                let Some((from, refs)) = map.refs(*h) else { continue };
                any = true;
                if map.holds(*h, tier) {
                    continue;
                }
                let keys: Option<Vec<u64>> = refs.as_slice().iter().map(|r| self.resolve_ref(*r, ep, from)).collect();
                if let Some(keys) = keys
                    && map.hold(*h, refs.as_slice(), tier, cap)
                {
                    keys.iter().for_each(|k| self.add(*k, ep, tier, AddMode::Counted));
                }
            }
            stats.stored_blocks += s.block_hashes.len() as u64;
            return if any { EventOutcome::Applied } else { EventOutcome::UnknownBlock };
        }
        if let Some(outcome) = span_error(s) {
            return outcome;
        }
        let parent = match s.parent_block_hash {
            None => keyer.root(s.lora_name.as_deref().filter(|l| !l.is_empty()).unwrap_or(model)),
            Some(p) => match self.parent_key(&map, ep, p) {
                Some(k) => k,
                None => return EventOutcome::UnknownParent,
            },
        };
        let n_req = s.token_ids.len() / block_size.max(1);
        let extras = realign_extras(s, n_req);
        let req = keyer.chain(parent, &s.token_ids, block_size, &extras);
        if req.len() == s.block_hashes.len() {
            // Equal block sizes (the common case): one request key per engine
            // block. The engine map is updated first (its buckets prefetched a
            // few blocks ahead), then the newly mapped keys go to the key
            // tables in one batch.
            let hashes = &s.block_hashes;
            hashes.iter().take(MAP_AHEAD).for_each(|h| map.prefetch(*h, tier));
            let mut fresh = Vec::with_capacity(req.len());
            for (i, (h, k)) in hashes.iter().zip(&req).enumerate() {
                if let Some(ahead) = hashes.get(i + MAP_AHEAD) {
                    map.prefetch(*ahead, tier);
                }
                if map.hold(*h, &[key_ref(*k)], tier, cap) {
                    fresh.push(*k);
                }
            }
            self.add_batch(&fresh, ep, tier, AddMode::Counted);
        } else {
            self.hold_aligned(&mut map, ep, tier, &s.block_hashes, &req);
        }
        stats.stored_blocks += s.block_hashes.len() as u64;
        EventOutcome::Applied
    }

    /// Maps each engine block to the request keys aligned to it (block sizes differ).
    fn hold_aligned(&self, map: &mut EngineMap, ep: EndpointId, tier: u8, hashes: &[u64], req: &[u64]) {
        let cap = self.config.engine_map_capacity;
        let mut per_engine: Vec<Vec<u64>> = vec![Vec::new(); hashes.len()];
        for (e, r) in align_blocks(hashes.len(), req.len()) {
            if per_engine[e].last() != Some(&req[r]) {
                per_engine[e].push(req[r]);
            }
        }
        for (h, keys) in hashes.iter().zip(&per_engine) {
            let refs: Vec<KeyRef> = keys.iter().map(|k| key_ref(*k)).collect();
            if map.hold(*h, &refs, tier, cap) {
                keys.iter().for_each(|k| self.add(*k, ep, tier, AddMode::Counted));
            }
        }
    }

    /// The request key of the last epp block of engine block `parent`, found
    /// through the source's engine map and the key table.
    fn parent_key(&self, map: &EngineMap, ep: EndpointId, parent: u64) -> Option<u64> {
        let (tier, refs) = map.refs(parent)?;
        self.resolve_ref(*refs.as_slice().last()?, ep, tier)
    }

    fn apply_removed(&self, ep: EndpointId, rank: u32, r: &BlockRemoved, stats: &mut ApplyStats) -> EventOutcome {
        let tier = r.tier().id();
        stats.removed_blocks += r.block_hashes.len() as u64;
        if let KeyMode::Engine { .. } = self.config.key_mode {
            self.remove_batch(&r.block_hashes, ep, tier, RemoveMode::Force);
            return EventOutcome::Applied;
        }
        let Some(mut map) = self.engine_maps.get_mut(&(ep, rank)) else { return EventOutcome::UnknownBlock };
        let mut released = Vec::with_capacity(r.block_hashes.len());
        let mut any = false;
        for h in &r.block_hashes {
            if let Some(refs) = map.release(*h, tier) {
                any = true;
                released.extend_from_slice(refs.as_slice());
            }
        }
        self.release_batch(&released, ep, tier);
        if any { EventOutcome::Applied } else { EventOutcome::UnknownBlock }
    }
}

/// Extra identifiers per request block: bare strings other than the LoRA
/// name (LoRA is already in the root; llm-d-router #2927) and MM identifiers,
/// moved from engine block i to request block ⌊i·n_req/n_eng⌋.
pub(crate) fn realign_extras(s: &BlockStored, n_req: usize) -> Vec<Vec<&str>> {
    let n_eng = s.block_hashes.len();
    if s.extra_keys.iter().all(Option::is_none) || n_req == 0 || n_eng == 0 {
        return Vec::new();
    }
    let mut out = vec![Vec::new(); n_req];
    for (i, keys) in s.extra_keys.iter().enumerate().take(n_eng) {
        let j = i * n_req / n_eng;
        for k in keys.iter().flatten() {
            let id = match k {
                ExtraKey::Str(x) if Some(x.as_str()) != s.lora_name.as_deref() => x.as_str(),
                ExtraKey::Mm { identifier, .. } => identifier.as_str(),
                _ => continue,
            };
            if !out[j].contains(&id) {
                out[j].push(id);
            }
        }
    }
    out
}
