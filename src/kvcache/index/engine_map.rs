//! Engine hash -> request keys, per source `(endpoint, data-parallel rank)`.
//!
//! Only used when the index is keyed on epp's request keys: a `BlockStored`
//! whose parent is an engine hash needs the request key of that parent, and
//! a `BlockRemoved` names engine hashes whose request keys must be released.
//! Mappings are kept per tier, so a repeated `BlockStored` of the same hash
//! and tier is an idempotent upsert and every (hash, tier) mapping is exactly
//! one reference on each mapped request key. The one-key case (engine and epp
//! block sizes equal) is a packed `u64 -> u64` entry: about 17-39 bytes per
//! engine block at hashbrown's 44-87 % load, against 37-73 with a tier byte
//! and an enum per entry. Bounded: past `capacity` mappings new hashes are not
//! recorded (counted).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::kvcache::events::Tier;

/// Hasher for keys that already are well-mixed 64-bit hashes.
#[derive(Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let x = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

/// `BuildHasher` for [`MixHasher`].
pub type MixState = BuildHasherDefault<MixHasher>;

/// Request keys one engine hash maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// The common case: engine and epp block sizes are equal.
    One(u64),
    /// Engine blocks larger than epp blocks. Boxed twice on purpose: a thin
    /// pointer keeps `Keys` at 16 bytes, and this variant is rare.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<u64>>),
}

impl Keys {
    /// From a non-empty list.
    pub fn from_slice(keys: &[u64]) -> Option<Self> {
        match keys {
            [] => None,
            [k] => Some(Keys::One(*k)),
            many => Some(Keys::Many(Box::new(many.to_vec()))),
        }
    }

    /// As a slice.
    pub fn as_slice(&self) -> &[u64] {
        match self {
            Keys::One(k) => std::slice::from_ref(k),
            Keys::Many(ks) => ks.as_slice(),
        }
    }
}

/// One tier's mappings: the common one-key case packed as `u64 -> u64` (16 bytes
/// plus one control byte per bucket), longer lists beside it.
#[derive(Debug, Default)]
struct TierMap {
    one: HashMap<u64, u64, MixState>,
    many: HashMap<u64, Box<[u64]>, MixState>,
}

impl TierMap {
    fn get(&self, engine: u64) -> Option<Keys> {
        match self.one.get(&engine) {
            Some(k) => Some(Keys::One(*k)),
            None => self.many.get(&engine).map(|ks| Keys::Many(Box::new(ks.to_vec()))),
        }
    }

    fn last(&self, engine: u64) -> Option<u64> {
        self.one.get(&engine).copied().or_else(|| self.many.get(&engine).and_then(|ks| ks.last().copied()))
    }

    fn contains(&self, engine: u64) -> bool {
        self.one.contains_key(&engine) || self.many.contains_key(&engine)
    }

    fn insert(&mut self, engine: u64, keys: &[u64]) {
        match keys {
            [k] => {
                self.one.insert(engine, *k);
            }
            many => {
                self.many.insert(engine, many.into());
            }
        }
    }

    fn remove(&mut self, engine: u64) -> Option<Keys> {
        match self.one.remove(&engine) {
            Some(k) => Some(Keys::One(k)),
            None => self.many.remove(&engine).map(|ks| Keys::Many(Box::new(ks.into_vec()))),
        }
    }

    fn len(&self) -> usize {
        self.one.len() + self.many.len()
    }

    fn bytes(&self) -> usize {
        let many: usize = self.many.values().map(|ks| ks.len() * 8).sum();
        self.one.capacity() * 17 + self.many.capacity() * 25 + many
    }
}

/// One source's engine map: a map per tier, so holding a hash in a tier is
/// the presence of its mapping there (no per-entry tier bits).
#[derive(Debug, Default)]
pub struct EngineMap {
    tiers: [TierMap; Tier::COUNT],
}

impl EngineMap {
    fn tier(&self, tier: u8) -> Option<&TierMap> {
        self.tiers.get(usize::from(tier))
    }

    /// Last request key mapped from `engine` (the parent of a continuation), any tier.
    pub fn last_request_key(&self, engine: u64) -> Option<u64> {
        self.tiers.iter().find_map(|t| t.last(engine))
    }

    /// Request keys mapped from `engine`, whatever the tier.
    pub fn keys(&self, engine: u64) -> Option<Keys> {
        self.tiers.iter().find_map(|t| t.get(engine))
    }

    /// Marks `engine` held in `tier`. The request keys are those already mapped
    /// from `engine` in another tier, else `keys` (a new hash is recorded only
    /// while fewer than `capacity` mappings exist). Returns the keys that
    /// gained a reference, or `None` when the tier already held it (or no room,
    /// or no keys).
    pub fn hold(&mut self, engine: u64, keys: &[u64], tier: u8, capacity: usize) -> Option<Keys> {
        if self.tier(tier)?.contains(engine) {
            return None;
        }
        let keys = match self.keys(engine) {
            Some(existing) => existing,
            None if self.len() >= capacity => return None,
            None => Keys::from_slice(keys)?,
        };
        self.tiers[usize::from(tier)].insert(engine, keys.as_slice());
        Some(keys)
    }

    /// Clears `tier` of `engine`; returns the keys that lost a reference.
    pub fn release(&mut self, engine: u64, tier: u8) -> Option<Keys> {
        self.tiers.get_mut(usize::from(tier))?.remove(engine)
    }

    /// Number of (hash, tier) mappings.
    pub fn len(&self) -> usize {
        self.tiers.iter().map(TierMap::len).sum()
    }

    /// Approximate heap bytes.
    pub fn bytes(&self) -> usize {
        self.tiers.iter().map(TierMap::bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_mappings_are_packed() {
        let mut m = EngineMap::default();
        for h in 1..=1000u64 {
            m.hold(h, &[h * 10], 0, usize::MAX);
        }
        assert!(m.bytes() <= 1000 * 40, "{} bytes for 1000 mappings", m.bytes());
        assert_eq!(m.hold(5000, &[1, 2, 3], 1, usize::MAX), Some(Keys::Many(Box::new(vec![1, 2, 3]))));
        assert_eq!(m.keys(5000).map(|k| k.as_slice().to_vec()), Some(vec![1, 2, 3]));
        assert_eq!(m.last_request_key(5000), Some(3));
        assert_eq!(m.release(5000, 1).map(|k| k.as_slice().to_vec()), Some(vec![1, 2, 3]));
        assert_eq!(m.len(), 1000);
    }

    #[test]
    fn hold_is_idempotent_per_tier_and_release_drops_at_zero() {
        let mut m = EngineMap::default();
        assert_eq!(m.hold(7, &[70], 0, 10), Some(Keys::One(70)));
        assert_eq!(m.hold(7, &[71], 0, 10), None);
        assert_eq!(m.hold(7, &[71], 1, 10), Some(Keys::One(70)));
        assert_eq!(m.last_request_key(7), Some(70));
        assert_eq!(m.release(7, 0), Some(Keys::One(70)));
        assert_eq!(m.release(7, 0), None);
        assert_eq!(m.release(7, 1), Some(Keys::One(70)));
        assert_eq!(m.len(), 0);
        assert_eq!(m.hold(1, &[1], 0, 0), None);
        assert_eq!(m.hold(2, &[], 0, 10), None);
    }
}
