//! A compact map from 24-bit engine-hash fingerprints to 40-bit key references.
//!
//! One `u64` per bucket (`fingerprint << 40 | value`, `0` = empty). The home
//! bucket is computed from the fingerprint alone (`fp · n >> 24` for `n` home
//! buckets), so entries can be moved and rehashed without the original hash.
//! Ordered linear probing without wrap-around: home buckets are monotone in the
//! fingerprint and every run of occupied buckets is kept sorted by it, so the
//! whole array is sorted, a search stops at the first larger fingerprint (short
//! even when full), deletion shifts the run back, and growth is one linear merge.
//! Runs may spill into a few slack buckets past the last home. That allows a 92 %
//! maximum load with growth by 15 % (loads 80-92 %), so a mapping costs 8.7-10
//! bytes. Fingerprints are unique in a table: inserting one that is present keeps
//! the old value (the caller treats it as held). Not thread-safe.
//!
//! The split of the 64 bits: the value is a [`KeyRef`] (40 bits, so two keys
//! one source holds rarely share one); 24 fingerprint bits make a collision
//! between two live mappings of a table of n entries a chance of n/2²⁴ per
//! insert, which the engine map absorbs in its exact side map.

use super::table::{KeyRef, REF_BITS};

const MIN_HOMES: usize = 16;

/// Bits of a fingerprint.
pub const FP_BITS: u32 = 64 - REF_BITS;

const VALUE_MASK: u64 = (1 << REF_BITS) - 1;

/// Fingerprint of an engine hash: [`FP_BITS`] well-mixed bits, never 0.
pub fn fingerprint(engine: u64) -> u32 {
    let x = (engine ^ (engine >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    ((x >> (64 - FP_BITS)) as u32).max(1)
}

fn fp_of(bucket: u64) -> u32 {
    (bucket >> REF_BITS) as u32
}

fn value_of(bucket: u64) -> KeyRef {
    bucket & VALUE_MASK
}

/// Buckets past the last home for runs that spill over: a few plus 1/64.
fn slack(homes: usize) -> usize {
    8 + homes / 64
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct RefTable {
    /// `homes + slack(homes)` buckets, sorted by fingerprint.
    buckets: Vec<u64>,
    homes: usize,
    len: usize,
}

impl RefTable {
    fn home(&self, fp: u32) -> usize {
        ((u64::from(fp) * self.homes as u64) >> FP_BITS) as usize
    }

    /// Where `fp` is, or where it belongs: the first bucket from its home that is
    /// empty or holds a fingerprint >= `fp` (`None` past the end of the array).
    fn seek(&self, fp: u32) -> Option<usize> {
        let mut i = self.home(fp);
        while let Some(&b) = self.buckets.get(i) {
            if b == 0 || fp_of(b) >= fp {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    fn find(&self, fp: u32) -> Option<usize> {
        self.seek(fp).filter(|i| fp_of(self.buckets[*i]) == fp)
    }

    /// Starts loading the home bucket of `fp` into the cache.
    pub fn prefetch(&self, fp: u32) {
        super::table::prefetch(self.buckets.as_ptr().wrapping_add(self.home(fp)));
    }

    /// The value stored under `fp`.
    pub fn get(&self, fp: u32) -> Option<KeyRef> {
        self.find(fp).map(|i| value_of(self.buckets[i]))
    }

    /// Stores `value` under `fp` unless `fp` is present; true when stored.
    #[cfg(test)]
    pub fn insert(&mut self, fp: u32, value: KeyRef) -> bool {
        self.try_insert(fp, value).is_ok()
    }

    /// Stores `value` under `fp`, or returns the value already there. One
    /// search: the bucket it ends on is where a new entry goes (at load below
    /// the maximum, usually an empty one).
    #[inline]
    pub fn try_insert(&mut self, fp: u32, value: KeyRef) -> Result<(), KeyRef> {
        debug_assert!(fp != 0 && fp >> FP_BITS == 0, "fingerprints are never 0 and have FP_BITS bits");
        debug_assert_eq!(value & !VALUE_MASK, 0, "values have REF_BITS bits");
        let at = self.seek(fp);
        if let Some(i) = at
            && fp_of(self.buckets[i]) == fp
        {
            return Err(value_of(self.buckets[i]));
        }
        let bucket = (u64::from(fp) << REF_BITS) | value;
        let full = (self.len + 1) * 25 > self.homes * 23;
        if full || !at.is_some_and(|i| self.place_at(i, bucket)) {
            if full {
                self.grow();
            }
            while !self.try_place(bucket) {
                self.grow();
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Inserts in order, shifting the rest of the run right; false when the run
    /// would spill past the slack.
    fn try_place(&mut self, bucket: u64) -> bool {
        self.seek(fp_of(bucket)).is_some_and(|at| self.place_at(at, bucket))
    }

    /// Puts `bucket` at `at` (its place in order), shifting the run from `at`
    /// right by one; false when no empty bucket follows.
    fn place_at(&mut self, at: usize, bucket: u64) -> bool {
        if self.buckets[at] == 0 {
            self.buckets[at] = bucket;
            return true;
        }
        let Some(gap) = self.buckets[at..].iter().position(|b| *b == 0) else { return false };
        self.buckets.copy_within(at..at + gap, at + 1);
        self.buckets[at] = bucket;
        true
    }

    fn grow(&mut self) {
        let homes = (self.homes + self.homes * 3 / 20).max(MIN_HOMES);
        let old = std::mem::replace(&mut self.buckets, vec![0; homes + slack(homes)]);
        self.homes = homes;
        // Sorted input: each entry goes to its home or right after the previous one.
        let mut next = 0;
        for b in old.into_iter().filter(|b| *b != 0) {
            let at = self.home(fp_of(b)).max(next);
            if at >= self.buckets.len() {
                // Cannot happen with 8 + 1/64 slack at <= 92 % load, but stay total.
                self.buckets.resize(at + 1, 0);
            }
            self.buckets[at] = b;
            next = at + 1;
        }
    }

    /// Removes `fp`; returns its value.
    #[inline]
    pub fn remove(&mut self, fp: u32) -> Option<KeyRef> {
        let mut i = self.find(fp)?;
        let value = value_of(self.buckets[i]);
        // Shift the run back while its entries sit right of their homes.
        while let Some(&b) = self.buckets.get(i + 1) {
            if b == 0 || self.home(fp_of(b)) > i {
                break;
            }
            self.buckets[i] = b;
            i += 1;
        }
        self.buckets[i] = 0;
        self.len -= 1;
        Some(value)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes.
    pub fn bytes(&self) -> usize {
        self.buckets.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn loads_stay_between_80_and_92_percent_and_bytes_under_10_5() {
        let mut t = RefTable::default();
        let fp = |k: u32| k.wrapping_mul(0x9E37_79B1) & ((1 << FP_BITS) - 1);
        for k in 1..=200_000u32 {
            // A bijection of the FP_BITS-bit numbers: distinct, well-spread fingerprints.
            assert!(t.insert(fp(k), u64::from(k) << 8 | 0xAB));
            if k > 1000 {
                let load = t.len() as f64 / t.homes as f64;
                assert!((0.79..=0.921).contains(&load), "load {load} at {k}");
                assert!(t.bytes() as f64 / t.len() as f64 <= 10.5, "{} bytes at {k}", t.bytes());
            }
        }
        assert!(!t.insert(fp(7), 0), "fingerprints are unique");
        assert_eq!(t.get(fp(7)), Some(7 << 8 | 0xAB), "all 40 value bits kept");
        assert!(t.insert((1 << FP_BITS) - 1, (1 << REF_BITS) - 1), "the largest fingerprint and value");
        assert_eq!(t.get((1 << FP_BITS) - 1), Some((1 << REF_BITS) - 1));
        assert!(t.buckets.windows(2).all(|w| w[0] == 0 || w[1] == 0 || fp_of(w[0]) < fp_of(w[1])), "runs sorted");
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec((any::<bool>(), 1u32..300, 0..1u64 << REF_BITS), 1..2000)) {
            let mut t = RefTable::default();
            let mut model = HashMap::new();
            for (insert, fp, v) in ops {
                // Small fingerprints crowd the first homes: long runs and spills.
                if insert {
                    let fresh = !model.contains_key(&fp);
                    prop_assert_eq!(t.insert(fp, v), fresh);
                    model.entry(fp).or_insert(v);
                } else {
                    prop_assert_eq!(t.remove(fp), model.remove(&fp));
                }
                prop_assert_eq!(t.len(), model.len());
            }
            for (fp, v) in &model {
                prop_assert_eq!(t.get(*fp), Some(*v));
            }
        }

        #[test]
        fn spread_fingerprints_behave_like_a_map(ops in prop::collection::vec((0u8..3, any::<u32>()), 1..3000)) {
            let mut t = RefTable::default();
            let mut model: HashMap<u32, KeyRef> = HashMap::new();
            for (op, x) in ops {
                let fp = ((x % 5000).wrapping_mul(0x9E37_79B1) >> (32 - FP_BITS)).max(1);
                if op < 2 {
                    let fresh = !model.contains_key(&fp);
                    prop_assert_eq!(t.insert(fp, u64::from(x)), fresh);
                    model.entry(fp).or_insert(u64::from(x));
                } else {
                    prop_assert_eq!(t.remove(fp), model.remove(&fp));
                }
            }
            for (fp, v) in &model {
                prop_assert_eq!(t.get(*fp), Some(*v));
            }
        }
    }
}
