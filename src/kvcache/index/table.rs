//! One shard's key table: open addressing with linear probing.
//!
//! Buckets are `(key, slot)` pairs of two `u64` (16 bytes, four per cache
//! line), key `0` marks an empty bucket (a real key 0 lives in a side slot).
//! A key's home is `key_order(key) · n >> 32` for `n` home buckets (any count),
//! monotone in the order, and every run of occupied buckets is kept sorted
//! by order, with no wrap-around (runs may spill into a few slack buckets
//! past the last home). So the whole array is sorted, a search stops at the
//! first larger order (a miss costs little even in long runs), deletion
//! shifts the run back (no tombstones), and growth is one linear merge. That
//! allows an 88 % maximum load with growth by 15 % (load 77-88 %, not the
//! 40-80 % of a doubling table at 80 %). A slot holds up to two
//! [`holder`]s inline; keys with more holders keep them in a slab list the
//! slot points to. When
//! the shard reaches its key budget, a pseudo-random key is evicted (random
//! eviction needs no per-key recency state, which is what keeps the entry
//! small). Not thread-safe: the index wraps each table in a lock.

use super::buckets::{Bucket, Buckets};
use super::holder::{self, EndpointId, OVERFLOW};
use super::slab::Slab;
use smallvec::SmallVec;

const MIN_BUCKETS: usize = 64;

/// Buckets from its home that [`Table::slot_of`] checks by key alone (two
/// cache lines; the slack past the last home is larger, so the window always
/// fits in the array for a key whose home is in range).
const SCAN: usize = 8;

/// Starts loading the cache line at `at`. A hint only: it never faults, so
/// any address is harmless.
pub fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 does not access memory architecturally and never faults.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// A key's 32-bit order: the top half of its product with a
/// multiplicative-hash constant. Its high bits give the key's home bucket
/// ([`bucket_of`]) and its low bits the key's shard, so it names where the key
/// lives; tables keep keys sorted by it.
pub fn key_order(key: u64) -> u32 {
    (key.wrapping_mul(SPREAD) >> 32) as u32
}

/// Bits of a [`KeyRef`].
pub const REF_BITS: u32 = 40;

/// A key's reference (engine maps store it instead of the key): the top
/// [`REF_BITS`] bits of the same product, so its top 32 bits are the key's
/// [`key_order`] (where to look) and the 8 below tell apart keys of one
/// order. Two keys one source holds can still share a reference (about
/// n²/2⁴¹ such pairs for n keys held), which `RefMatch::Ambiguous` covers.
pub type KeyRef = u64;

/// The [`KeyRef`] of `key`.
pub fn key_ref(key: u64) -> KeyRef {
    key.wrapping_mul(SPREAD) >> (64 - REF_BITS)
}

/// The [`key_order`] of the keys with reference `kref`.
pub fn ref_order(kref: KeyRef) -> u32 {
    (kref >> (REF_BITS - 32)) as u32
}

/// The shard of the keys of order `order` among `mask + 1` shards (a power
/// of two): the order's low bits, independent of the in-table position (its
/// top bits) while a shard has fewer than `2^(32 - log2 shards)` buckets.
pub fn shard_of(order: u32, mask: usize) -> usize {
    order as usize & mask
}

/// Home bucket of order `order` in a table of `n` buckets (any `n` < 2^32).
pub fn bucket_of(order: u32, n: usize) -> usize {
    ((u64::from(order) * n as u64) >> 32) as usize
}

/// Home buckets after `n`: 15 % more, so loads stay within 77-88 %. Not
/// rounded to huge pages: only the array's last partial 2 MiB window is served
/// by 4 KiB pages (see `buckets.rs`), a small share of the buckets with the
/// default 16 shards.
fn grown_homes(n: usize) -> usize {
    n + (n * 3 / 20).max(1)
}

/// Buckets past the last home, for runs that spill over: a few plus 1/64.
fn slack(homes: usize) -> usize {
    16 + homes / 64
}

/// Maximum keys per home bucket: 88 %.
fn over_load(keys: usize, homes: usize) -> bool {
    keys * 25 > homes * 22
}

/// What a key reference resolves to for one holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefMatch {
    /// No key with this reference has the holder (evicted, or never stored).
    None,
    /// Exactly one key.
    One(u64),
    /// Several keys with the same reference have the holder.
    Ambiguous,
}

/// Where a key sits: the side slot of key 0, or a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The side slot (key 0).
    Zero,
    /// The bucket at this index.
    Bucket(usize),
}

/// Whether a store counts as a new reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddMode {
    /// Increment the refcount when the holder exists (a new source holds it).
    Counted,
    /// Idempotent upsert: existing holders are left as they are.
    Set,
}

/// Whether a removal honours refcounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveMode {
    /// Drop one reference; the holder goes at zero.
    Release,
    /// Drop the holder whatever its refcount.
    Force,
}

/// What a lookup reads of a table, borrowed once per lookup: the bucket
/// slice and home count sit in the view, so a key's probe does not go
/// through the table (nor the bucket array's representation) again.
#[derive(Debug, Clone, Copy)]
pub struct TableView<'t> {
    table: &'t Table,
    buckets: &'t [Bucket],
    homes: usize,
}

impl<'t> TableView<'t> {
    /// The table.
    pub fn table(&self) -> &'t Table {
        self.table
    }

    /// Starts loading the cache lines of the home bucket of the keys of
    /// order `order` and of the bucket four past it: a held key sits a few
    /// buckets past its home (about three on average at these loads), often
    /// on the next line. The second line made lookups of 32-128 keys 8-11 %
    /// faster (2026-12-07, repeated lookups, four alternations).
    #[inline]
    pub fn prefetch_order(&self, order: u32) {
        let home = self.buckets.as_ptr().wrapping_add(bucket_of(order, self.homes));
        prefetch(home);
        prefetch(home.wrapping_add(4));
    }

    /// The slot of `key` (of order `order`, its `key_order`) when it sits in
    /// the [`SCAN`] buckets from its home, where a held key nearly always
    /// is; `None` leaves the answer to [`Table::slot_of`].
    #[inline]
    pub fn slot_near(&self, key: u64, order: u32) -> Option<u64> {
        scan_near(self.buckets, bucket_of(order, self.homes), key)
    }
}

/// The slot of `key` if one of the [`SCAN`] buckets from `home` holds it
/// (checked by key alone: no order to compute). A branch-free comparison
/// of the first buckets was tried against the mispredicted loop exit: more
/// instructions, fewer mispredictions, no faster (2026-12-07).
#[inline]
fn scan_near(buckets: &[Bucket], home: usize, key: u64) -> Option<u64> {
    let near = buckets.get(home..home + SCAN)?;
    near.iter().find(|b| b[0] == key && key != 0).map(|b| b[1])
}

/// A shard's table. See the module doc.
#[derive(Debug)]
pub struct Table {
    buckets: Buckets,
    /// Home buckets (`buckets` has `slack(homes)` more, or enough for the last run).
    homes: usize,
    keys: usize,
    entries: usize,
    zero: u64,
    slab: Slab,
    max_keys: usize,
    rng: u64,
    evictions: u64,
}

impl Table {
    /// A table holding at most `max_keys` keys (at least one).
    pub fn new(max_keys: usize, seed: u64) -> Self {
        Table {
            buckets: Buckets::zeroed(MIN_BUCKETS + slack(MIN_BUCKETS)),
            homes: MIN_BUCKETS,
            keys: 0,
            entries: 0,
            zero: 0,
            slab: Slab::default(),
            max_keys: max_keys.max(1),
            rng: seed | 1,
            evictions: 0,
        }
    }

    /// The view a lookup reads through.
    pub fn view(&self) -> TableView<'_> {
        TableView { table: self, buckets: &self.buckets, homes: self.homes }
    }

    /// Number of keys.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// Number of `(key, endpoint, tier)` holders.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Keys evicted for capacity so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Approximate heap bytes.
    pub fn bytes(&self) -> usize {
        self.buckets.len() * 16 + self.slab.bytes()
    }

    fn home(&self, key: u64) -> usize {
        bucket_of(key_order(key), self.homes)
    }

    /// Where `key` is, or (`Err`) where it belongs: the first bucket from its
    /// home that is empty or holds a larger order (`Err(len)` past the end).
    fn seek(&self, key: u64) -> Result<usize, usize> {
        let order = key_order(key);
        let mut i = bucket_of(order, self.homes);
        while let Some(&[k, _]) = self.buckets.get(i) {
            if k == key {
                return Ok(i);
            }
            if k == 0 || key_order(k) > order {
                return Err(i);
            }
            i += 1;
        }
        Err(i)
    }

    fn find(&self, key: u64) -> Option<usize> {
        self.seek(key).ok()
    }

    /// The packed slot of `key` (`0` when absent): two inline holders or an overflow reference.
    ///
    /// A held key sits a few buckets past its home at these loads, so the
    /// first [`SCAN`] buckets are checked by key alone (no order to compute)
    /// before the ordered search that settles a miss.
    pub fn slot_of(&self, key: u64) -> u64 {
        if key == 0 {
            return self.zero;
        }
        match scan_near(&self.buckets, self.home(key), key) {
            Some(slot) => slot,
            None => self.find(key).map_or(0, |i| self.buckets[i][1]),
        }
    }

    /// Calls `f` with each holder of a slot from [`Table::slot_of`]; false when it is empty.
    pub fn for_each_in_slot(&self, slot: u64, mut f: impl FnMut(u32)) -> bool {
        if slot == 0 {
            return false;
        }
        let (lo, hi) = holder::split(slot);
        if lo == OVERFLOW {
            self.slab.get(hi).iter().for_each(|h| f(*h));
        } else {
            f(lo);
            if hi != 0 {
                f(hi);
            }
        }
        true
    }

    /// Adds to `blocks[ep]` the number of keys endpoint `ep` holds (in any tier), growing
    /// `blocks` as needed. One pass over the table.
    pub fn count_keys_by_endpoint(&self, blocks: &mut Vec<u64>) {
        let mut holders: Vec<EndpointId> = Vec::new();
        let mut count = |slot: u64| {
            holders.clear();
            self.for_each_in_slot(slot, |h| {
                let ep = holder::endpoint(h);
                if !holders.contains(&ep) {
                    holders.push(ep);
                }
            });
            for ep in &holders {
                let ep = usize::from(*ep);
                if blocks.len() <= ep {
                    blocks.resize(ep + 1, 0);
                }
                blocks[ep] += 1;
            }
        };
        count(self.zero);
        for &[key, slot] in self.buckets.iter() {
            if key != 0 {
                count(slot);
            }
        }
    }

    /// Calls `f` with each holder of `key`; returns false when the key is absent.
    #[cfg(test)]
    pub fn for_each_holder(&self, key: u64, f: impl FnMut(u32)) -> bool {
        self.for_each_in_slot(self.slot_of(key), f)
    }

    /// Calls `f` with the place and key of each key whose [`key_ref`] is `kref`
    /// and that holder `(ep, tier)` holds, in ascending place order (the side
    /// slot first). They all sit among the keys of the reference's order, which
    /// are adjacent from that order's home bucket on.
    fn for_each_by_ref(&self, kref: KeyRef, ep: EndpointId, tier: u8, mut f: impl FnMut(Place, u64)) {
        let id = holder::identity(holder::pack(ep, tier));
        let held = |slot: u64| {
            let mut found = false;
            self.for_each_in_slot(slot, |h| found |= holder::identity(h) == id);
            found
        };
        if kref == key_ref(0) && held(self.zero) {
            f(Place::Zero, 0);
        }
        let order = ref_order(kref);
        let mut i = bucket_of(order, self.homes);
        while let Some(&[k, slot]) = self.buckets.get(i) {
            if k == 0 || key_order(k) > order {
                return;
            }
            if key_ref(k) == kref && held(slot) {
                f(Place::Bucket(i), k);
            }
            i += 1;
        }
    }

    /// Resolves a key reference for holder `(ep, tier)`.
    pub fn resolve_ref(&self, kref: KeyRef, ep: EndpointId, tier: u8) -> RefMatch {
        let mut m = RefMatch::None;
        self.for_each_by_ref(kref, ep, tier, |_, k| {
            m = if m == RefMatch::None { RefMatch::One(k) } else { RefMatch::Ambiguous };
        });
        m
    }

    /// Drops one reference of holder `(ep, tier)` from every key with
    /// reference `kref` (normally one; all of them when ambiguous, so nothing
    /// stays held that should not). Returns how many keys matched.
    ///
    /// The keys are released where the search found them, last first: a
    /// deletion shifts only the buckets after it, so the earlier places stay
    /// valid (and no key is searched for twice).
    pub fn release_ref(&mut self, kref: KeyRef, ep: EndpointId, tier: u8) -> usize {
        let mut places: SmallVec<[Place; 2]> = SmallVec::new();
        self.for_each_by_ref(kref, ep, tier, |at, _| places.push(at));
        let id = holder::identity(holder::pack(ep, tier));
        for at in places.iter().rev() {
            self.remove_at(*at, |h| holder::identity(h) == id, RemoveMode::Release);
        }
        places.len()
    }

    /// Starts loading the home bucket of the keys of order `order`.
    pub fn prefetch_order(&self, order: u32) {
        self.view().prefetch_order(order);
    }

    /// Whether slot `sa` of `a` and slot `sb` of `b` have the same holders,
    /// refcounts aside: inline slots compare their two holders in order,
    /// overflow lists their holder-set fingerprints (see [`super::slab`]),
    /// so neither list is read. Equal inline slots (the common case deep in
    /// a lookup: same holders, same refcounts) are settled first.
    #[inline]
    pub fn same_holders(a: &Table, sa: u64, b: &Table, sb: u64) -> bool {
        let ((alo, ahi), (blo, bhi)) = (holder::split(sa), holder::split(sb));
        match (alo == OVERFLOW, blo == OVERFLOW) {
            (false, false) if sa == sb => true,
            (false, false) => {
                // 0 is "no holder"; a holder's identity can be 0 (endpoint 0, tier 0).
                let id = |h: u32| if h == 0 { u32::MAX } else { holder::identity(h) };
                id(alo) == id(blo) && id(ahi) == id(bhi)
            }
            (true, true) => a.slab.fingerprint(ahi) == b.slab.fingerprint(bhi),
            _ => false,
        }
    }

    /// Starts loading the overflow list a slot refers to (no-op for inline slots).
    pub fn prefetch_overflow(&self, slot: u64) {
        let (lo, hi) = holder::split(slot);
        if lo == OVERFLOW {
            self.slab.prefetch(hi);
        }
    }

    /// Adds holder `(ep, tier)` to `key`. Returns true when a new holder was created.
    pub fn add(&mut self, key: u64, ep: EndpointId, tier: u8, mode: AddMode) -> bool {
        let h = holder::pack(ep, tier);
        if key == 0 {
            let mut slot = self.zero;
            let added = Self::add_to_slot(&mut self.slab, &mut slot, h, mode);
            if self.zero == 0 {
                self.keys += 1;
            }
            self.zero = slot;
            self.entries += usize::from(added);
            return added;
        }
        let at = match self.seek(key) {
            Ok(i) => {
                let mut slot = self.buckets[i][1];
                let added = Self::add_to_slot(&mut self.slab, &mut slot, h, mode);
                self.buckets[i][1] = slot;
                self.entries += usize::from(added);
                return added;
            }
            Err(at) => at,
        };
        let bucket = [key, u64::from(h)];
        // The search ended where the key goes: place it there unless the table
        // must first evict or grow (both move buckets).
        let roomy = self.keys < self.max_keys && !over_load(self.keys + 1, self.homes);
        if !(roomy && self.place_at(at, bucket)) {
            if self.keys >= self.max_keys {
                self.evict_one();
            }
            if over_load(self.keys + 1, self.homes) {
                self.grow();
            }
            while !self.try_place(bucket) {
                self.grow();
            }
        }
        self.keys += 1;
        self.entries += 1;
        true
    }

    /// Inserts a new key in order, shifting the rest of its run
    /// right; false when the run would spill past the end of the array.
    fn try_place(&mut self, bucket: [u64; 2]) -> bool {
        let at = match self.seek(bucket[0]) {
            Ok(at) | Err(at) => at,
        };
        self.place_at(at, bucket)
    }

    /// Puts `bucket` at `at` (its place in order), shifting the run from `at`
    /// right by one; false when no empty bucket follows.
    fn place_at(&mut self, at: usize, bucket: [u64; 2]) -> bool {
        let Some(rest) = self.buckets.get_mut(at..) else { return false };
        if let Some(first) = rest.first_mut()
            && first[0] == 0
        {
            *first = bucket;
            return true;
        }
        let Some(gap) = rest.iter().position(|b| b[0] == 0) else { return false };
        rest.copy_within(0..gap, 1);
        rest[0] = bucket;
        true
    }

    fn add_to_slot(slab: &mut Slab, slot: &mut u64, h: u32, mode: AddMode) -> bool {
        let bump = |x: u32| if mode == AddMode::Counted { holder::incremented(x) } else { x };
        let (lo, hi) = holder::split(*slot);
        if lo == OVERFLOW {
            return slab.add(hi, h, bump);
        }
        if lo == 0 {
            *slot = u64::from(h);
            return true;
        }
        if holder::identity(lo) == holder::identity(h) {
            *slot = holder::join(bump(lo), hi);
            return false;
        }
        if hi != 0 && holder::identity(hi) == holder::identity(h) {
            *slot = holder::join(lo, bump(hi));
            return false;
        }
        if hi == 0 {
            *slot = holder::join(lo, h);
        } else {
            *slot = holder::join(OVERFLOW, slab.alloc(&[lo, hi, h]));
        }
        true
    }

    /// Removes holder `(ep, tier)` from `key`. Returns true when the holder went away.
    pub fn remove(&mut self, key: u64, ep: EndpointId, tier: u8, mode: RemoveMode) -> bool {
        let id = holder::identity(holder::pack(ep, tier));
        self.remove_where(key, |h| holder::identity(h) == id, mode) > 0
    }

    /// Removes the holders of `key` matching `pred`; returns how many went.
    fn remove_where(&mut self, key: u64, pred: impl Fn(u32) -> bool, mode: RemoveMode) -> usize {
        let at = match key {
            0 => Place::Zero,
            _ => match self.find(key) {
                Some(i) => Place::Bucket(i),
                None => return 0,
            },
        };
        self.remove_at(at, pred, mode)
    }

    /// Removes the holders matching `pred` of the key at `at`; returns how many
    /// went. The key goes (its bucket deleted) with its last holder.
    fn remove_at(&mut self, at: Place, pred: impl Fn(u32) -> bool, mode: RemoveMode) -> usize {
        let mut slot = match at {
            Place::Zero => self.zero,
            Place::Bucket(i) => self.buckets[i][1],
        };
        if slot == 0 {
            return 0;
        }
        let removed = Self::remove_from_slot(&mut self.slab, &mut slot, pred, mode);
        self.entries -= removed;
        if slot == 0 {
            self.keys -= 1;
        }
        match at {
            Place::Zero => self.zero = slot,
            Place::Bucket(i) if slot == 0 => self.delete_at(i),
            Place::Bucket(i) => self.buckets[i][1] = slot,
        }
        removed
    }

    fn remove_from_slot(slab: &mut Slab, slot: &mut u64, pred: impl Fn(u32) -> bool, mode: RemoveMode) -> usize {
        let drop_one = |h: u32| if mode == RemoveMode::Release { holder::decremented(h) } else { None };
        let (lo, hi) = holder::split(*slot);
        if lo != OVERFLOW {
            // Inline fast path: no allocation.
            let (mut kept, mut n, mut removed) = ([0u32; 2], 0, 0);
            for h in [lo, hi].into_iter().filter(|h| *h != 0) {
                match if pred(h) { drop_one(h) } else { Some(h) } {
                    Some(x) => {
                        kept[n] = x;
                        n += 1;
                    }
                    None => removed += 1,
                }
            }
            *slot = holder::join(kept[0], kept[1]);
            return removed;
        }
        let list = slab.free(hi);
        let before = list.as_slice().len();
        let list: Vec<u32> =
            list.as_slice().iter().filter_map(|h| if pred(*h) { drop_one(*h) } else { Some(*h) }).collect();
        let removed = before - list.len();
        *slot = match list.as_slice() {
            [] => 0,
            [a] => u64::from(*a),
            [a, b] => holder::join(*a, *b),
            _ => holder::join(OVERFLOW, slab.alloc(&list)),
        };
        removed
    }

    /// Deletion of bucket `i`: the rest of its run shifts back while its
    /// entries sit right of their homes (the order is kept).
    fn delete_at(&mut self, mut i: usize) {
        while let Some(&next) = self.buckets.get(i + 1) {
            if next[0] == 0 || self.home(next[0]) > i {
                break;
            }
            self.buckets[i] = next;
            i += 1;
        }
        self.buckets[i] = [0, 0];
    }

    /// Rebuilds with more home buckets: the array is sorted by order, so
    /// each key goes to its new home or right after the previous key.
    fn grow(&mut self) {
        let homes = grown_homes(self.homes);
        let place = |b: &[u64; 2], next: usize| bucket_of(key_order(b[0]), homes).max(next);
        let mut end = 0;
        for b in self.buckets.iter().filter(|b| b[0] != 0) {
            end = place(b, end) + 1;
        }
        let grown = Buckets::zeroed((homes + slack(homes)).max(end + slack(homes)));
        let old = std::mem::replace(&mut self.buckets, grown);
        self.homes = homes;
        let mut next = 0;
        for b in old.iter().filter(|b| b[0] != 0) {
            let at = place(b, next);
            self.buckets[at] = *b;
            next = at + 1;
        }
    }

    fn evict_one(&mut self) {
        // xorshift64: cheap, deterministic per shard.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let mut i = (self.rng % self.buckets.len() as u64) as usize;
        for _ in 0..self.buckets.len() {
            if self.buckets[i][0] != 0 {
                if self.remove_at(Place::Bucket(i), |_| true, RemoveMode::Force) > 0 {
                    self.evictions += 1;
                }
                return;
            }
            i = if i + 1 == self.buckets.len() { 0 } else { i + 1 };
        }
        if self.zero != 0 && self.remove_at(Place::Zero, |_| true, RemoveMode::Force) > 0 {
            self.evictions += 1;
        }
    }

    /// Removes every holder of endpoint `ep`; returns how many went.
    pub fn remove_endpoint(&mut self, ep: EndpointId) -> usize {
        let mut removed = self.remove_at(Place::Zero, |h| holder::endpoint(h) == ep, RemoveMode::Force);
        let mut i = 0;
        while i < self.buckets.len() {
            let [k, slot] = self.buckets[i];
            let (lo, hi) = holder::split(slot);
            let has =
                k != 0 && (lo == OVERFLOW || holder::endpoint(lo) == ep || (hi != 0 && holder::endpoint(hi) == ep));
            if has {
                removed += self.remove_at(Place::Bucket(i), |h| holder::endpoint(h) == ep, RemoveMode::Force);
                // A delete shifted a later bucket into i: look at i again.
                if self.buckets[i][0] != k {
                    continue;
                }
            }
            i += 1;
        }
        removed
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
