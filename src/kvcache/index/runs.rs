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
//! then served from cache. A key not found within a few buckets of its
//! home is left unread until the loop gets to it (the keys staged past the
//! end of the longest run are mostly such misses, and a miss's full search
//! is the costly one). A heap-held list is read only when the holders
//! change, which is rare. Each key's shard table is reached through a
//! [`TableView`] taken once per lookup.
//!
//! The tracker's buffers are kept per thread and reused, so a lookup
//! allocates nothing here.

use std::cell::RefCell;

use super::TierWeights;
use super::holder::{self, EndpointId};
use super::table::{Table, TableView, key_order, shard_of};
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
    /// `Σ_tier blocks(tier) · weight(tier)` over the run, set when it ends.
    pub weighted: f64,
    /// Blocks per tier counted for this run alone (mixed-tier keys); the
    /// blocks counted for every live run are added when it ends.
    per_tier: [u32; Tier::COUNT],
}

impl Run {
    fn new(ep: EndpointId) -> Self {
        Run { ep, blocks: 0, weighted: 0.0, per_tier: [0; Tier::COUNT] }
    }
}

/// `Σ_tier blocks(tier) · weight(tier)`.
fn weigh(per_tier: &[u32; Tier::COUNT], w: &TierWeights) -> f64 {
    per_tier.iter().zip(w.0).map(|(n, w)| f64::from(*n) * w).sum()
}

/// `n` low bits set (all 64 from `n >= 64` on).
fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1 << n) - 1 }
}

/// The candidate index of holder `h`'s endpoint.
fn candidate(cand_of_ep: &[u32], h: u32) -> Option<usize> {
    match cand_of_ep.get(usize::from(holder::endpoint(h))) {
        Some(c) if *c > 0 => Some(*c as usize - 1),
        _ => None,
    }
}

/// The tier id of holder `h`, in `0..Tier::COUNT` (as `Tier::from_id`
/// maps it: out-of-range ids are `Other`), without a branch.
fn tier_id(h: u32) -> u8 {
    let t = holder::tier(h);
    if usize::from(t) < Tier::COUNT { t } else { Tier::Other.id() }
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
    /// `(i, weigh(shared))` for the last key `i` at which a run with no
    /// blocks of its own ended: every such run ending at `i` has that score
    /// (runs mostly end together, where a shared prefix forks).
    shared_weighted: (usize, f64),
}

impl<'a> Tracker<'a> {
    /// Candidates from the holders of key 0 (each endpoint once), all live
    /// and holding key 0. One pass over the holders.
    fn start(w: &'a TierWeights, s: &'a mut Scratch, table: &Table, slot: u64) -> Self {
        for r in &s.runs {
            s.cand_of_ep[usize::from(r.ep)] = 0;
        }
        s.runs.clear();
        let mut held_tiers = 0;
        let (runs, cand_of_ep) = (&mut s.runs, &mut s.cand_of_ep);
        table.for_each_in_slot(slot, |h| {
            held_tiers |= 1 << tier_id(h);
            let e = usize::from(holder::endpoint(h));
            if e >= cand_of_ep.len() {
                cand_of_ep.resize(e + 1, 0);
            }
            if cand_of_ep[e] == 0 {
                runs.push(Run::new(holder::endpoint(h)));
                cand_of_ep[e] = runs.len() as u32;
            }
        });
        let n = s.runs.len();
        s.live.clear();
        s.live.extend((0..n.div_ceil(64)).map(|word| low_bits(n - word * 64)));
        s.held.clone_from(&s.live);
        Tracker { w, s, held_tiers, shared: [0; Tier::COUNT], best_ready: false, shared_weighted: (usize::MAX, 0.0) }
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
        if r.per_tier == [0; Tier::COUNT] {
            if self.shared_weighted.0 != i {
                self.shared_weighted = (i, weigh(&self.shared, self.w));
            }
            r.weighted = self.shared_weighted.1;
        } else {
            r.per_tier.iter_mut().zip(self.shared).for_each(|(n, s)| *n += s);
            r.weighted = weigh(&r.per_tier, self.w);
        }
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
/// (key `k` lives in `views[shard_of(key_order(k), mask)]`), runs of 0 blocks
/// included, passed to `report`.
pub(super) fn longest_runs<R>(
    keys: &[u64],
    views: &[TableView<'_>],
    mask: usize,
    w: &TierWeights,
    report: impl FnOnce(&[Run]) -> R,
) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            track(&mut s, keys, views, mask, w);
            report(&s.runs)
        }
        // Only a lookup nested inside `report` gets here: it uses its own buffers.
        Err(_) => {
            let mut s = Scratch::default();
            track(&mut s, keys, views, mask, w);
            report(&s.runs)
        }
    })
}

/// Reads the slot of key `i` into its place in `ring`, and starts loading
/// its overflow list. A key not found near its home is left UNREAD, to be
/// settled by the table's full search only if the loop gets to it (the keys
/// staged past the end of the longest run are mostly such misses). Always
/// inlined: it runs once per key, from three places.
#[inline(always)]
fn stage_key<'t>(
    keys: &[u64],
    views: &[TableView<'t>],
    mask: usize,
    i: usize,
    ring: &mut [(&'t Table, u64); SLOT_AHEAD],
) {
    let (k, order) = (keys[i], key_order(keys[i]));
    let view = &views[shard_of(order, mask)];
    let slot = view.slot_near(k, order).unwrap_or(holder::UNREAD);
    view.table().prefetch_overflow(slot);
    ring[i % SLOT_AHEAD] = (view.table(), slot);
}

/// Fills `s.runs` (see [`longest_runs`]).
fn track<'t>(s: &mut Scratch, keys: &[u64], views: &[TableView<'t>], mask: usize, w: &TierWeights) {
    let n = keys.len();
    let Some(&first) = keys.first() else {
        s.runs.iter().for_each(|r| s.cand_of_ep[usize::from(r.ep)] = 0);
        s.runs.clear();
        return;
    };
    let view_of = |order: u32| &views[shard_of(order, mask)];
    let prefetch = |k: u64| {
        let order = key_order(k);
        view_of(order).prefetch_order(order);
    };
    // Slots read SLOT_AHEAD keys early, in a ring, with their tables.
    let mut ring = [(view_of(key_order(first)).table(), 0u64); SLOT_AHEAD];
    let stage = |i: usize, ring: &mut [(&'t Table, u64); SLOT_AHEAD]| stage_key(keys, views, mask, i, ring);
    let read = |i: usize, ring: &[(&'t Table, u64); SLOT_AHEAD]| match ring[i % SLOT_AHEAD] {
        (table, holder::UNREAD) => (table, table.slot_of(keys[i])),
        staged => staged,
    };
    keys[..n.min(BUCKET_AHEAD)].iter().for_each(|k| prefetch(*k));
    for i in 0..n.min(SLOT_AHEAD) {
        stage(i, &mut ring);
    }
    let (table, slot) = read(0, &ring);
    // The loop below stages key i + SLOT_AHEAD from i = 1 on: stage the first one here.
    if let Some(&k) = keys.get(BUCKET_AHEAD) {
        prefetch(k);
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
        let (table, slot) = read(i, &ring);
        if let Some(&k) = keys.get(i + BUCKET_AHEAD) {
            prefetch(k);
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
        let views = [t.view()];
        assert_eq!(longest_runs(&[1, 2, 3, 4], &views, 0, &w, blocks), want);
        // The candidates of the lookup before are gone.
        assert_eq!(longest_runs(&[5, 6, 1], &views, 0, &w, blocks), vec![(100, 2)]);
        let (outer, inner) = longest_runs(&[1, 2, 3, 4], &views, 0, &w, |runs| {
            (blocks(runs), longest_runs(&[5, 6], &views, 0, &w, blocks))
        });
        assert_eq!((outer, inner), (want, vec![(100, 2)]));
        assert_eq!(longest_runs(&[], &views, 0, &w, blocks), vec![]);
    }
}
