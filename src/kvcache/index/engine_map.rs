//! Engine hash -> request keys, per source `(endpoint, data-parallel rank)`.
//!
//! Only used when the index is keyed on epp's request keys: a `BlockStored`
//! whose parent is an engine hash needs the request key of that parent, and
//! a `BlockRemoved` names engine hashes whose request keys must be released.
//! Each mapping remembers which tiers hold it (a bit per tier), so a repeated
//! `BlockStored` of the same hash and tier is an idempotent upsert and every
//! tier bit is exactly one reference on each mapped request key.
//! Bounded: past `capacity` mappings new hashes are not recorded (counted).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

#[derive(Debug)]
struct Mapping {
    keys: Keys,
    tiers: u8,
}

/// One source's engine map.
#[derive(Debug, Default)]
pub struct EngineMap {
    map: HashMap<u64, Mapping, MixState>,
}

impl EngineMap {
    /// Last request key mapped from `engine` (the parent of a continuation).
    pub fn last_request_key(&self, engine: u64) -> Option<u64> {
        self.map.get(&engine).and_then(|m| m.keys.as_slice().last().copied())
    }

    /// Request keys mapped from `engine`, whatever the tier.
    pub fn keys(&self, engine: u64) -> Option<&Keys> {
        self.map.get(&engine).map(|m| &m.keys)
    }

    /// Marks `engine` held in `tier`, creating the mapping from `keys` when new
    /// (and room is left under `capacity`). Returns the keys that gained a
    /// reference, or `None` when the tier was already held (or no room).
    pub fn hold(&mut self, engine: u64, keys: &[u64], tier: u8, capacity: usize) -> Option<Keys> {
        let bit = 1u8 << (tier & 7);
        if !self.map.contains_key(&engine) && self.map.len() >= capacity {
            return None;
        }
        let m = match self.map.get_mut(&engine) {
            Some(m) => m,
            None => self.map.entry(engine).or_insert(Mapping { keys: Keys::from_slice(keys)?, tiers: 0 }),
        };
        if m.tiers & bit != 0 {
            return None;
        }
        m.tiers |= bit;
        Some(m.keys.clone())
    }

    /// Clears `tier` of `engine`; returns the keys that lost a reference.
    pub fn release(&mut self, engine: u64, tier: u8) -> Option<Keys> {
        let bit = 1u8 << (tier & 7);
        let m = self.map.get_mut(&engine)?;
        if m.tiers & bit == 0 {
            return None;
        }
        m.tiers &= !bit;
        if m.tiers == 0 {
            return self.map.remove(&engine).map(|m| m.keys);
        }
        Some(m.keys.clone())
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Approximate heap bytes.
    pub fn bytes(&self) -> usize {
        self.map.capacity() * (std::mem::size_of::<(u64, Mapping)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_stays_small() {
        assert_eq!(std::mem::size_of::<(u64, Mapping)>(), 32);
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
