//! A compact map from 32-bit engine-hash fingerprints to 32-bit key references.
//!
//! One `u64` per bucket (`fingerprint << 32 | value`, `0` = empty). The home
//! bucket is computed from the fingerprint alone (`fp · n >> 32` for `n` home
//! buckets), so entries can be moved and rehashed without the original hash.
//! Ordered linear probing without wrap-around: home buckets are monotone in the
//! fingerprint and every run of occupied buckets is kept sorted by it, so the
//! whole array is sorted, a search stops at the first larger fingerprint (short
//! even when full), deletion shifts the run back, and growth is one linear merge.
//! Runs may spill into a few slack buckets past the last home. That allows a 92 %
//! maximum load with growth by 15 % (loads 80-92 %), so a mapping costs 8.7-10
//! bytes. Fingerprints are unique in a table: inserting one that is present keeps
//! the old value (the caller treats it as held). Not thread-safe.

const MIN_HOMES: usize = 16;

/// Fingerprint of an engine hash: 32 well-mixed bits, never 0.
pub fn fingerprint(engine: u64) -> u32 {
    let x = (engine ^ (engine >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    ((x ^ (x >> 32)) as u32).max(1)
}

fn fp_of(bucket: u64) -> u32 {
    (bucket >> 32) as u32
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
        ((u64::from(fp) * self.homes as u64) >> 32) as usize
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
    pub fn get(&self, fp: u32) -> Option<u32> {
        self.find(fp).map(|i| self.buckets[i] as u32)
    }

    /// Stores `value` under `fp` unless `fp` is present; true when stored.
    #[cfg(test)]
    pub fn insert(&mut self, fp: u32, value: u32) -> bool {
        self.try_insert(fp, value).is_ok()
    }

    /// Stores `value` under `fp`, or returns the value already there. One
    /// search: the bucket it ends on is where a new entry goes (at load below
    /// the maximum, usually an empty one).
    pub fn try_insert(&mut self, fp: u32, value: u32) -> Result<(), u32> {
        debug_assert_ne!(fp, 0, "fingerprints are never 0");
        let at = self.seek(fp);
        if let Some(i) = at
            && fp_of(self.buckets[i]) == fp
        {
            return Err(self.buckets[i] as u32);
        }
        let bucket = (u64::from(fp) << 32) | u64::from(value);
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
    pub fn remove(&mut self, fp: u32) -> Option<u32> {
        let mut i = self.find(fp)?;
        let value = self.buckets[i] as u32;
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
        for k in 1..=200_000u32 {
            // A bijection of u32: distinct, well-spread fingerprints.
            assert!(t.insert(k.wrapping_mul(0x9E37_79B1), k));
            if k > 1000 {
                let load = t.len() as f64 / t.homes as f64;
                assert!((0.79..=0.921).contains(&load), "load {load} at {k}");
                assert!(t.bytes() as f64 / t.len() as f64 <= 10.5, "{} bytes at {k}", t.bytes());
            }
        }
        let fp7 = 7u32.wrapping_mul(0x9E37_79B1);
        assert!(!t.insert(fp7, 0), "fingerprints are unique");
        assert_eq!(t.get(fp7), Some(7));
        assert!(t.buckets.windows(2).all(|w| w[0] == 0 || w[1] == 0 || fp_of(w[0]) < fp_of(w[1])), "runs sorted");
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec((any::<bool>(), 1u32..300, any::<u32>()), 1..2000)) {
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
            let mut model: HashMap<u32, u32> = HashMap::new();
            for (op, x) in ops {
                let fp = (x % 5000).wrapping_mul(0x9E37_79B1).max(1);
                if op < 2 {
                    let fresh = !model.contains_key(&fp);
                    prop_assert_eq!(t.insert(fp, x), fresh);
                    model.entry(fp).or_insert(x);
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
