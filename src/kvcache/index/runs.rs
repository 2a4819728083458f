//! The lookup loop: per endpoint, the longest run of leading keys it holds,
//! over tables the caller has locked.
//!
//! Candidates are the endpoints holding key 0, numbered densely; the live
//! ones form a bitset, and a candidate's run ends at the first key it lacks.
//! For each key the candidates holding it form a bitset too, so a key costs
//! one pass over its holders and a few word operations. A key whose holders
//! are those of the key before it (a prefix cached by the same pods, the
//! common case deep in a long query) costs one comparison instead: of the two
//! inline slots, or of the two slab lists' holder-set fingerprints (neither
//! list is read).
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
//! list entry (holding the list's fingerprint) prefetched, and key `i` is
//! then served from cache. A heap-held list is read only when the holders
//! change, which is rare.
//!
//! The tracker's buffers are kept per thread and reused, so a lookup
//! allocates nothing here.

use std::cell::RefCell;

use super::TierWeights;
use super::holder::{self, EndpointId};
use super::table::Table;
use crate::kvcache::events::Tier;

/// How many keys ahead a lookup prefetches a key's bucket.
const BUCKET_AHEAD: usize = 32;
/// How many keys ahead a lookup reads a key's slot (its bucket prefetched
/// `BUCKET_AHEAD - SLOT_AHEAD` keys earlier) and prefetches its overflow list.
const SLOT_AHEAD: usize = 16;

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

/// Buffers of one lookup, reused by the next one on the same thread.
#[derive(Default)]
struct Scratch {
    runs: Vec<Run>,
    /// Endpoint id -> 1 + candidate index (0 = not a candidate); nonzero
    /// only at the endpoints of `runs`, which the next lookup clears.
    cand_of_ep: Vec<u32>,
    /// Candidates still matching, one bit each.
    live: Vec<u64>,
    /// Candidates holding the current key.
    held: Vec<u64>,
    /// Best tier per candidate at the current key (mixed-tier keys only).
    best: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Run state of one lookup.
struct Tracker<'a> {
    w: &'a TierWeights,
    s: &'a mut Scratch,
    /// Tiers (bit per tier id) in which candidates hold the current key.
    held_tiers: u32,
    /// Blocks per tier counted for every live run.
    shared: [u32; Tier::COUNT],
    /// Whether `s.best` has been reset for this lookup's candidates.
    best_ready: bool,
}

impl<'a> Tracker<'a> {
    /// Candidates from the holders of key 0 (each endpoint once), all live
    /// and holding key 0.
    fn start(w: &'a TierWeights, s: &'a mut Scratch, table: &Table, slot: u64) -> Self {
        for r in &s.runs {
            s.cand_of_ep[usize::from(r.ep)] = 0;
        }
        s.runs.clear();
        let (mut top, mut held_tiers) = (0, 0);
        table.for_each_in_slot(slot, |h| {
            top = top.max(usize::from(holder::endpoint(h)));
            held_tiers |= 1 << tier_id(h);
        });
        if s.cand_of_ep.len() <= top {
            s.cand_of_ep.resize(top + 1, 0);
        }
        let (runs, cand_of_ep) = (&mut s.runs, &mut s.cand_of_ep);
        table.for_each_in_slot(slot, |h| {
            let e = usize::from(holder::endpoint(h));
            if cand_of_ep[e] == 0 {
                runs.push(Run { ep: holder::endpoint(h), blocks: 0, per_tier: [0; Tier::COUNT] });
                cand_of_ep[e] = runs.len() as u32;
            }
        });
        let n = s.runs.len();
        s.live.clear();
        s.live.resize(n.div_ceil(64), 0);
        for c in 0..n {
            s.live[c / 64] |= 1 << (c % 64);
        }
        s.held.clone_from(&s.live);
        Tracker { w, s, held_tiers, shared: [0; Tier::COUNT], best_ready: false }
    }

    /// Sets `held` and `held_tiers` from the holders of `slot`.
    fn collect(&mut self, table: &Table, slot: u64) {
        self.s.held.fill(0);
        self.held_tiers = 0;
        let (held, tiers) = (&mut self.s.held, &mut self.held_tiers);
        let cand_of_ep = &self.s.cand_of_ep;
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
        for w in 0..self.s.live.len() {
            let mut ended = self.s.live[w] & !self.s.held[w];
            while ended != 0 {
                let c = w * 64 + ended.trailing_zeros() as usize;
                ended &= ended - 1;
                self.end(c, i);
            }
            self.s.live[w] &= self.s.held[w];
            any |= self.s.live[w] != 0;
        }
        if any {
            self.count_block(table, slot);
        }
        any
    }

    /// Counts a key held by every live candidate (its holders in `held_tiers`).
    #[inline]
    fn count_block(&mut self, table: &Table, slot: u64) {
        if self.held_tiers.count_ones() == 1 {
            self.shared[self.held_tiers.trailing_zeros() as usize] += 1;
        } else {
            self.add_best_tiers(table, slot);
        }
    }

    /// A mixed-tier key: each live candidate gets a block of its best tier.
    fn add_best_tiers(&mut self, table: &Table, slot: u64) {
        let n = self.s.runs.len();
        if !self.best_ready {
            self.s.best.clear();
            self.s.best.resize(n, NO_TIER);
            self.best_ready = true;
        }
        let (w, cand_of_ep, live, best) = (self.w, &self.s.cand_of_ep, &self.s.live, &mut self.s.best);
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
        for (c, b) in self.s.best.iter_mut().enumerate() {
            if *b != NO_TIER {
                self.s.runs[c].per_tier[usize::from(*b)] += 1;
                *b = NO_TIER;
            }
        }
    }

    /// Candidate `c`'s run ends before key `i`.
    fn end(&mut self, c: usize, i: usize) {
        let r = &mut self.s.runs[c];
        r.blocks = i;
        r.per_tier.iter_mut().zip(self.shared).for_each(|(n, s)| *n += s);
    }

    /// Runs still live after `n` keys end there.
    fn finish(mut self, n: usize) {
        for w in 0..self.s.live.len() {
            let mut live = self.s.live[w];
            while live != 0 {
                let c = w * 64 + live.trailing_zeros() as usize;
                live &= live - 1;
                self.end(c, n);
            }
        }
    }
}

/// Per candidate endpoint, the run of `keys` it holds from the first
/// (`table_of(k)` holds key `k`), runs of 0 blocks included, passed to
/// `report`.
pub(super) fn longest_runs<'t, R>(
    keys: &[u64],
    table_of: impl Fn(u64) -> &'t Table,
    w: &TierWeights,
    report: impl FnOnce(&[Run]) -> R,
) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            track(&mut s, keys, table_of, w);
            report(&s.runs)
        }
        // Only a lookup nested inside `report` gets here: it uses its own buffers.
        Err(_) => {
            let mut s = Scratch::default();
            track(&mut s, keys, table_of, w);
            report(&s.runs)
        }
    })
}

/// Fills `s.runs` (see [`longest_runs`]).
fn track<'t>(s: &mut Scratch, keys: &[u64], table_of: impl Fn(u64) -> &'t Table, w: &TierWeights) {
    let n = keys.len();
    let Some(&first) = keys.first() else {
        s.runs.iter().for_each(|r| s.cand_of_ep[usize::from(r.ep)] = 0);
        s.runs.clear();
        return;
    };
    // Slots read SLOT_AHEAD keys early, in a ring, with their tables.
    let mut ring = [(table_of(first), 0u64); SLOT_AHEAD];
    let stage = |i: usize, ring: &mut [(&'t Table, u64); SLOT_AHEAD]| {
        let table = table_of(keys[i]);
        let slot = table.slot_of(keys[i]);
        table.prefetch_overflow(slot);
        ring[i % SLOT_AHEAD] = (table, slot);
    };
    for &k in &keys[..n.min(BUCKET_AHEAD)] {
        table_of(k).prefetch_bucket(k);
    }
    for i in 0..n.min(SLOT_AHEAD) {
        stage(i, &mut ring);
    }
    let (table, slot) = ring[0];
    // The loop below stages key i + SLOT_AHEAD from i = 1 on: stage the first one here.
    if let Some(&k) = keys.get(BUCKET_AHEAD) {
        table_of(k).prefetch_bucket(k);
    }
    if SLOT_AHEAD < n {
        stage(SLOT_AHEAD, &mut ring);
    }
    let mut tracker = Tracker::start(w, s, table, slot);
    if !tracker.step(0, table, slot) {
        return tracker.finish(0);
    }
    let mut prev = (table, slot);
    for i in 1..n {
        let (table, slot) = ring[i % SLOT_AHEAD];
        if let Some(&k) = keys.get(i + BUCKET_AHEAD) {
            table_of(k).prefetch_bucket(k);
        }
        if i + SLOT_AHEAD < n {
            stage(i + SLOT_AHEAD, &mut ring);
        }
        if Table::same_holders(prev.0, prev.1, table, slot) {
            // Every live run holds this key too.
            tracker.count_block(table, slot);
        } else {
            tracker.collect(table, slot);
            if !tracker.step(i, table, slot) {
                return tracker.finish(i);
            }
        }
        prev = (table, slot);
    }
    tracker.finish(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::index::table::AddMode;

    fn blocks(runs: &[Run]) -> Vec<(EndpointId, usize)> {
        let mut v: Vec<_> = runs.iter().map(|r| (r.ep, r.blocks)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn buffers_are_reused_across_lookups_and_a_nested_lookup_gets_its_own() {
        let mut t = Table::new(1000, 1);
        // 70 candidates (two bitset words); endpoint e holds keys 1..=1 + e % 4.
        for e in 0..70u16 {
            for k in 1..=1 + u64::from(e % 4) {
                t.add(k, e, 0, AddMode::Set);
            }
        }
        t.add(5, 100, 0, AddMode::Set);
        t.add(6, 100, 0, AddMode::Set);
        let w = TierWeights::default();
        let want: Vec<_> = (0..70u16).map(|e| (e, 1 + usize::from(e % 4))).collect();
        let table_of = |_| &t;
        assert_eq!(longest_runs(&[1, 2, 3, 4], table_of, &w, blocks), want);
        // The candidates of the lookup before are gone.
        assert_eq!(longest_runs(&[5, 6, 1], table_of, &w, blocks), vec![(100, 2)]);
        let (outer, inner) = longest_runs(&[1, 2, 3, 4], table_of, &w, |runs| {
            (blocks(runs), longest_runs(&[5, 6], table_of, &w, blocks))
        });
        assert_eq!((outer, inner), (want, vec![(100, 2)]));
        assert_eq!(longest_runs(&[], table_of, &w, blocks), vec![]);
    }
}
