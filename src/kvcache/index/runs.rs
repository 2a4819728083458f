//! The lookup loop: per endpoint, the longest run of leading keys it holds,
//! over tables the caller has locked.
//!
//! Candidates are the endpoints holding key 0, numbered densely; the live
//! ones form a bitset, and a candidate's run ends at the first key it lacks.
//! For each key the candidates holding it form a bitset too, so a key costs
//! one pass over its holders and a few word operations. A key whose holders
//! are those of the key before it (a prefix cached by the same pods, the
//! common case deep in a long query) costs one comparison of the two holder
//! lists instead.
//!
//! Scores are counted in blocks per tier: a key whose candidate holders are
//! all in one tier adds a block of that tier to a counter shared by every live
//! run (a run takes the counter's value when it ends), any other key adds its
//! best tier to each live run. The weighted score is then
//! `Σ_tier blocks(tier) · weight(tier)`, the sum over the run of the best
//! tier weight per block.
//!
//! The keys stream through a two-stage software pipeline: the bucket of key
//! `i + 32` is prefetched, the slot of key `i + 16` is read and its overflow
//! list prefetched, a heap-held list of key `i + 8` is prefetched, and key `i`
//! is then served from cache.

use super::TierWeights;
use super::holder::{self, EndpointId};
use super::table::Table;
use crate::kvcache::events::Tier;

/// How many keys ahead a lookup prefetches a key's bucket.
const BUCKET_AHEAD: usize = 32;
/// How many keys ahead a lookup reads a key's slot (its bucket prefetched
/// `BUCKET_AHEAD - SLOT_AHEAD` keys earlier) and prefetches its overflow list.
const SLOT_AHEAD: usize = 16;
/// How many keys ahead a lookup prefetches an overflow list kept on the heap
/// (its slab entry prefetched `SLOT_AHEAD - HEAP_AHEAD` keys earlier).
const HEAP_AHEAD: usize = 8;

/// One endpoint's result.
pub(super) struct Run {
    pub ep: EndpointId,
    /// Keys matched from the first.
    pub blocks: usize,
    /// Blocks per tier (the best tier of each matched key).
    pub per_tier: [u32; Tier::COUNT],
}

impl Run {
    /// `Σ_tier blocks(tier) · weight(tier)`.
    pub fn weighted(&self, w: &TierWeights) -> f64 {
        self.per_tier.iter().zip(w.0).map(|(n, w)| f64::from(*n) * w).sum()
    }
}

/// The candidate index of holder `h`'s endpoint.
fn candidate(cand_of_ep: &[u32], h: u32) -> Option<usize> {
    match cand_of_ep.get(usize::from(holder::endpoint(h))) {
        Some(c) if *c > 0 => Some(*c as usize - 1),
        _ => None,
    }
}

/// The tier id of holder `h`, in `0..Tier::COUNT`.
fn tier_id(h: u32) -> u8 {
    Tier::from_id(holder::tier(h)).id()
}

/// No tier yet (slow path scratch).
const NO_TIER: u8 = u8::MAX;

/// Run state of one lookup.
struct Tracker<'a> {
    w: &'a TierWeights,
    runs: Vec<Run>,
    /// Endpoint id -> 1 + candidate index (0 = not a candidate).
    cand_of_ep: Vec<u32>,
    /// Candidates still matching, one bit each.
    live: Vec<u64>,
    /// Candidates holding the current key.
    held: Vec<u64>,
    /// Tiers (bit per tier id) in which candidates hold the current key.
    held_tiers: u32,
    /// Blocks per tier counted for every live run.
    shared: [u32; Tier::COUNT],
    /// Best tier per candidate at the current key (mixed-tier keys only).
    best: Vec<u8>,
}

impl<'a> Tracker<'a> {
    /// Candidates from the holders of key 0 (each endpoint once).
    fn start(w: &'a TierWeights, table: &Table, slot: u64) -> Self {
        // A first pass sizes the buffers, so each is allocated once.
        let (mut holders, mut top) = (0, 0);
        table.for_each_in_slot(slot, |h| {
            holders += 1;
            top = top.max(usize::from(holder::endpoint(h)));
        });
        let mut t = Tracker {
            w,
            runs: Vec::with_capacity(holders),
            cand_of_ep: vec![0; top + 1],
            live: Vec::new(),
            held: Vec::new(),
            held_tiers: 0,
            shared: [0; Tier::COUNT],
            best: Vec::new(),
        };
        table.for_each_in_slot(slot, |h| {
            let e = usize::from(holder::endpoint(h));
            if t.cand_of_ep[e] == 0 {
                t.runs.push(Run { ep: holder::endpoint(h), blocks: 0, per_tier: [0; Tier::COUNT] });
                t.cand_of_ep[e] = t.runs.len() as u32;
            }
        });
        let words = t.runs.len().div_ceil(64);
        t.live = vec![0; words];
        t.held = vec![0; words];
        for c in 0..t.runs.len() {
            t.live[c / 64] |= 1 << (c % 64);
        }
        t
    }

    /// Sets `held` and `held_tiers` from the holders of `slot`.
    fn collect(&mut self, table: &Table, slot: u64) {
        self.held.fill(0);
        self.held_tiers = 0;
        let (held, tiers) = (&mut self.held, &mut self.held_tiers);
        let cand_of_ep = &self.cand_of_ep;
        table.for_each_in_slot(slot, |h| {
            if let Some(c) = candidate(cand_of_ep, h) {
                held[c / 64] |= 1 << (c % 64);
                *tiers |= 1 << tier_id(h);
            }
        });
    }

    /// Applies key `i` (its holders already in `held`); false when no run is left.
    fn step(&mut self, i: usize, table: &Table, slot: u64) -> bool {
        let mut any = false;
        for w in 0..self.live.len() {
            let mut ended = self.live[w] & !self.held[w];
            while ended != 0 {
                let c = w * 64 + ended.trailing_zeros() as usize;
                ended &= ended - 1;
                self.end(c, i);
            }
            self.live[w] &= self.held[w];
            any |= self.live[w] != 0;
        }
        if !any {
            return false;
        }
        if self.held_tiers.count_ones() == 1 {
            self.shared[self.held_tiers.trailing_zeros() as usize] += 1;
        } else {
            self.add_best_tiers(table, slot);
        }
        true
    }

    /// A mixed-tier key: each live candidate gets a block of its best tier.
    fn add_best_tiers(&mut self, table: &Table, slot: u64) {
        if self.best.is_empty() {
            self.best = vec![NO_TIER; self.runs.len()];
        }
        let (w, cand_of_ep, live, best) = (self.w, &self.cand_of_ep, &self.live, &mut self.best);
        table.for_each_in_slot(slot, |h| {
            if let Some(c) = candidate(cand_of_ep, h)
                && live[c / 64] >> (c % 64) & 1 == 1
            {
                let t = tier_id(h);
                let b = &mut best[c];
                let (wt, wb) = (w.of(Tier::from_id(t)), w.of(Tier::from_id(*b)));
                if *b == NO_TIER || wt > wb || (wt == wb && t < *b) {
                    *b = t;
                }
            }
        });
        for (c, b) in self.best.iter_mut().enumerate() {
            if *b != NO_TIER {
                self.runs[c].per_tier[usize::from(*b)] += 1;
                *b = NO_TIER;
            }
        }
    }

    /// Candidate `c`'s run ends before key `i`.
    fn end(&mut self, c: usize, i: usize) {
        let r = &mut self.runs[c];
        r.blocks = i;
        r.per_tier.iter_mut().zip(self.shared).for_each(|(n, s)| *n += s);
    }

    /// Runs still live after `n` keys end there.
    fn finish(mut self, n: usize) -> Vec<Run> {
        for w in 0..self.live.len() {
            let mut live = self.live[w];
            while live != 0 {
                let c = w * 64 + live.trailing_zeros() as usize;
                live &= live - 1;
                self.end(c, n);
            }
        }
        self.runs
    }
}

/// Per candidate endpoint, the run of `keys` it holds from the first
/// (`tables[i]` holds `keys[i]`); runs of 0 blocks included.
pub(super) fn longest_runs(keys: &[u64], tables: &[&Table], w: &TierWeights) -> Vec<Run> {
    let n = keys.len().min(tables.len());
    if n == 0 {
        return Vec::new();
    }
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
    let mut tracker = Tracker::start(w, tables[0], ring[0]);
    let mut prev = (tables[0], 0u64);
    for i in 0..n {
        let slot = ring[i % SLOT_AHEAD];
        if i + BUCKET_AHEAD < n {
            tables[i + BUCKET_AHEAD].prefetch_bucket(keys[i + BUCKET_AHEAD]);
        }
        if i + HEAP_AHEAD < n {
            let j = i + HEAP_AHEAD;
            tables[j].prefetch_heap_list(ring[j % SLOT_AHEAD]);
        }
        if i + SLOT_AHEAD < n {
            stage_slot(i + SLOT_AHEAD, &mut ring);
        }
        if i == 0 || !Table::same_holders(prev.0, prev.1, tables[i], slot) {
            tracker.collect(tables[i], slot);
        }
        if !tracker.step(i, tables[i], slot) {
            return tracker.finish(i);
        }
        prev = (tables[i], slot);
    }
    tracker.finish(n)
}
