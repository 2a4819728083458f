//! A compact map from 32-bit engine-hash fingerprints to 32-bit key references.
//!
//! One `u64` per bucket (`fingerprint << 32 | value`, `0` = empty), open
//! addressing with linear probing and backward-shift deletion. The home bucket
//! is computed from the fingerprint alone (`fp · n >> 32`, any table size), so
//! entries can be moved and rehashed without the original hash; growth is by
//! a quarter (loads stay within 70-88 %), so a mapping costs 9.1-11.5 bytes. Fingerprints
//! are unique in a table: inserting a fingerprint that is already present
//! keeps the old value (the caller treats it as held). Not thread-safe.

const MIN_BUCKETS: usize = 16;

/// Fingerprint of an engine hash: 32 well-mixed bits, never 0.
pub fn fingerprint(engine: u64) -> u32 {
    let x = (engine ^ (engine >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    ((x ^ (x >> 32)) as u32).max(1)
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct RefTable {
    buckets: Vec<u64>,
    len: usize,
}

impl RefTable {
    fn home(&self, fp: u32) -> usize {
        ((u64::from(fp) * self.buckets.len() as u64) >> 32) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.buckets.len() { 0 } else { i + 1 }
    }

    fn find(&self, fp: u32) -> Option<usize> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut i = self.home(fp);
        loop {
            let b = self.buckets[i];
            if b == 0 {
                return None;
            }
            if (b >> 32) as u32 == fp {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// The value stored under `fp`.
    pub fn get(&self, fp: u32) -> Option<u32> {
        self.find(fp).map(|i| self.buckets[i] as u32)
    }

    /// Stores `value` under `fp` unless `fp` is present; true when stored.
    pub fn insert(&mut self, fp: u32, value: u32) -> bool {
        debug_assert_ne!(fp, 0, "fingerprints are never 0");
        if self.find(fp).is_some() {
            return false;
        }
        if (self.len + 1) * 8 > self.buckets.len() * 7 {
            self.grow();
        }
        self.place((u64::from(fp) << 32) | u64::from(value));
        self.len += 1;
        true
    }

    fn place(&mut self, bucket: u64) {
        let mut i = self.home((bucket >> 32) as u32);
        while self.buckets[i] != 0 {
            i = self.next(i);
        }
        self.buckets[i] = bucket;
    }

    fn grow(&mut self) {
        let n = (self.buckets.len() + self.buckets.len() / 4).max(MIN_BUCKETS);
        let old = std::mem::replace(&mut self.buckets, vec![0; n]);
        old.into_iter().filter(|b| *b != 0).for_each(|b| self.place(b));
    }

    /// Removes `fp`; returns its value.
    pub fn remove(&mut self, fp: u32) -> Option<u32> {
        let mut i = self.find(fp)?;
        let value = self.buckets[i] as u32;
        let mut j = self.next(i);
        loop {
            let b = self.buckets[j];
            if b == 0 {
                break;
            }
            let h = self.home((b >> 32) as u32);
            // Move j into the hole unless its home lies cyclically in (i, j].
            let stays = if i <= j { i < h && h <= j } else { i < h || h <= j };
            if !stays {
                self.buckets[i] = b;
                i = j;
            }
            j = self.next(j);
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
    fn loads_stay_between_70_and_88_percent() {
        let mut t = RefTable::default();
        for k in 1..=200_000u32 {
            // A bijection of u32: distinct, well-spread fingerprints.
            assert!(t.insert(k.wrapping_mul(0x9E37_79B1), k));
            if k > 1000 {
                let load = t.len() as f64 / t.buckets.len() as f64;
                assert!((0.69..=0.876).contains(&load), "load {load} at {k}");
            }
        }
        let fp7 = 7u32.wrapping_mul(0x9E37_79B1);
        assert!(!t.insert(fp7, 0), "fingerprints are unique");
        assert_eq!(t.get(fp7), Some(7));
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec((any::<bool>(), 1u32..300, any::<u32>()), 1..2000)) {
            let mut t = RefTable::default();
            let mut model = HashMap::new();
            for (insert, fp, v) in ops {
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
    }
}
