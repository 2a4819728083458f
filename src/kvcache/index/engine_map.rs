//! Engine hash -> request-key references, per source `(endpoint, data-parallel rank)`.
//!
//! Only used when the index is keyed on epp's request keys: a `BlockStored`
//! whose parent is an engine hash needs the request key of that parent, and
//! a `BlockRemoved` names engine hashes whose request keys must be released.
//! Mappings are kept per tier, so a repeated `BlockStored` of the same hash
//! and tier is an idempotent upsert and every (hash, tier) mapping is exactly
//! one reference on each mapped request key.
//!
//! Compact by design, because there is one mapping per (block, endpoint): the
//! one-key case (engine and epp block sizes equal) is one `u64` bucket of a
//! [`RefTable`], a 24-bit fingerprint of the engine hash and the 40-bit
//! [`key_ref`](super::table::key_ref) of the request key. The full key is
//! found again in the key table among the keys with that reference that the
//! source's `(endpoint, tier)` holds (see `PrefixIndex::resolve_ref`). Two of
//! the n keys a source holds share a 40-bit reference with probability about
//! n²/2⁴¹ at any moment (3·10⁻⁵ for n = 8,000; 256 times less often than the
//! 32-bit references used before); such a pair resolves to nothing, is
//! released together and is counted (`ambiguous_refs`).
//!
//! Beside it, an exact map keyed by the full engine hash takes engine blocks
//! spanning several request keys and fingerprint collisions: a new hash whose
//! fingerprint is taken by a mapping to a *different* reference goes there
//! (the same reference means the same block stored again: an idempotent
//! upsert). Lookups and removals try the exact map first, so both hashes stay
//! exact. The one inexact case is a hash that was never stored (a removal of
//! a block stored before the subscription, say) whose fingerprint matches a
//! live mapping: that mapping is released early, which loses a cache hit and
//! never keeps a stale one. (A publisher storing one hash twice with
//! different tokens would get two mappings; vLLM cannot: the hash covers
//! the tokens and the parent.) Bounded: past `capacity` mappings new hashes are
//! not recorded (counted by the caller).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::ref_table::{RefTable, fingerprint};
use super::table::KeyRef;
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

/// Key references one engine hash maps to, in chain order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refs {
    /// The common case: engine and epp block sizes are equal.
    One(KeyRef),
    /// Engine blocks larger than epp blocks.
    Many(Box<[KeyRef]>),
}

impl Refs {
    /// As a slice.
    pub fn as_slice(&self) -> &[KeyRef] {
        match self {
            Refs::One(r) => std::slice::from_ref(r),
            Refs::Many(rs) => rs,
        }
    }
}

/// One tier's mappings.
#[derive(Debug, Default)]
struct TierMap {
    one: RefTable,
    exact: HashMap<u64, Box<[KeyRef]>, MixState>,
}

impl TierMap {
    fn get(&self, engine: u64) -> Option<Refs> {
        if let Some(rs) = self.exact_get(engine) {
            return Some(match *rs {
                [r] => Refs::One(r),
                _ => Refs::Many(rs.into()),
            });
        }
        self.one.get(fingerprint(engine)).map(Refs::One)
    }

    /// The exact entry of `engine` (most tiers have none: skip hashing).
    fn exact_get(&self, engine: u64) -> Option<&[KeyRef]> {
        if self.exact.is_empty() { None } else { self.exact.get(&engine).map(|rs| &**rs) }
    }

    /// Records the mapping; false when `engine` already has one here.
    fn insert(&mut self, engine: u64, refs: &[KeyRef]) -> bool {
        if self.exact_get(engine).is_some() {
            return false;
        }
        if let [r] = refs {
            // One search: stored, or the reference already under this fingerprint.
            match self.one.try_insert(fingerprint(engine), *r) {
                Ok(()) => return true,
                Err(taken) if taken == *r => return false,
                Err(_) => {}
            }
        }
        self.exact.insert(engine, refs.into()).is_none()
    }

    fn remove(&mut self, engine: u64) -> Option<Refs> {
        let exact = if self.exact.is_empty() { None } else { self.exact.remove(&engine) };
        match exact {
            Some(rs) if rs.len() == 1 => Some(Refs::One(rs[0])),
            Some(rs) => Some(Refs::Many(rs)),
            None => self.one.remove(fingerprint(engine)).map(Refs::One),
        }
    }

    fn len(&self) -> usize {
        self.one.len() + self.exact.len()
    }

    fn bytes(&self) -> usize {
        let lists: usize = self.exact.values().map(|rs| rs.len() * 8).sum();
        self.one.bytes() + self.exact.capacity() * 25 + lists
    }
}

/// One source's engine map: a map per tier, so holding a hash in a tier is
/// the presence of its mapping there (no per-entry tier bits).
#[derive(Debug, Default)]
pub struct EngineMap {
    tiers: [TierMap; Tier::COUNT],
    /// Mappings over all tiers (checked against the capacity on every store).
    len: usize,
}

impl EngineMap {
    /// True when `tier` holds `engine`.
    pub fn holds(&self, engine: u64, tier: u8) -> bool {
        self.tiers.get(usize::from(tier)).is_some_and(|t| t.get(engine).is_some())
    }

    /// The references mapped from `engine` in the first tier holding it, with that tier.
    pub fn refs(&self, engine: u64) -> Option<(u8, Refs)> {
        self.tiers.iter().zip(0u8..).find_map(|(t, id)| t.get(engine).map(|r| (id, r)))
    }

    /// Records that `tier` holds `engine`, mapped to `refs`. False (nothing
    /// recorded) when the tier already holds it, when `refs` is empty, or when
    /// `engine` is new and `capacity` mappings exist.
    pub fn hold(&mut self, engine: u64, refs: &[KeyRef], tier: u8, capacity: usize) -> bool {
        if refs.is_empty() || usize::from(tier) >= Tier::COUNT {
            return false;
        }
        if self.len >= capacity && self.refs(engine).is_none() {
            return false;
        }
        let inserted = self.tiers[usize::from(tier)].insert(engine, refs);
        self.len += usize::from(inserted);
        inserted
    }

    /// Starts loading the bucket where `tier` keeps `engine` (a hint).
    pub fn prefetch(&self, engine: u64, tier: u8) {
        if let Some(t) = self.tiers.get(usize::from(tier)) {
            t.one.prefetch(fingerprint(engine));
        }
    }

    /// Clears `tier` of `engine`; returns the references that lost a holder.
    pub fn release(&mut self, engine: u64, tier: u8) -> Option<Refs> {
        let refs = self.tiers.get_mut(usize::from(tier))?.remove(engine)?;
        self.len -= 1;
        Some(refs)
    }

    /// Number of (hash, tier) mappings.
    pub fn len(&self) -> usize {
        debug_assert_eq!(self.len, self.tiers.iter().map(TierMap::len).sum::<usize>());
        self.len
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
    fn one_ref_mappings_cost_at_most_12_bytes() {
        let mut m = EngineMap::default();
        for h in 1..=100_000u64 {
            assert!(m.hold(h, &[h << 20], 0, usize::MAX));
        }
        // A few hundred 24-bit fingerprint collisions go to the exact map.
        assert!(m.bytes() <= 100_000 * 12, "{} bytes for 100k mappings", m.bytes());
        assert!((1..=100_000u64).step_by(997).all(|h| m.refs(h) == Some((0, Refs::One(h << 20)))), "40-bit refs kept");
        assert!(m.hold(500_000, &[1, 2, 3], 1, usize::MAX));
        assert_eq!(m.refs(500_000), Some((1, Refs::Many(vec![1, 2, 3].into()))));
        assert_eq!(m.release(500_000, 1).map(|r| r.as_slice().to_vec()), Some(vec![1, 2, 3]));
        assert_eq!(m.len(), 100_000);
    }

    #[test]
    fn hold_is_idempotent_per_tier_and_bounded() {
        let mut m = EngineMap::default();
        assert!(m.hold(7, &[70], 0, 10));
        assert!(!m.hold(7, &[70], 0, 10), "the same block stored again");
        assert!(m.hold(7, &[70], 1, 10));
        assert!(m.holds(7, 0) && m.holds(7, 1) && !m.holds(7, 2));
        assert_eq!(m.refs(7), Some((0, Refs::One(70))));
        assert_eq!(m.release(7, 0), Some(Refs::One(70)));
        assert_eq!(m.release(7, 0), None);
        assert_eq!(m.refs(7), Some((1, Refs::One(70))));
        assert_eq!(m.release(7, 1), Some(Refs::One(70)));
        assert_eq!(m.len(), 0);
        assert!(!m.hold(1, &[1], 0, 0), "no room");
        assert!(!m.hold(2, &[], 0, 10), "no refs");
        assert!(!m.hold(3, &[3], Tier::COUNT as u8, 10), "unknown tier");
    }

    #[test]
    fn fingerprint_collisions_stay_exact() {
        // Find two engine hashes with the same fingerprint.
        let mut seen = HashMap::new();
        let (a, b) = (1u64..)
            .find_map(|h| seen.insert(fingerprint(h), h).map(|prev| (prev, h)))
            .expect("a 24-bit collision within 2^24 + 1 hashes");
        let mut m = EngineMap::default();
        assert!(m.hold(a, &[10], 0, 100));
        assert!(m.hold(b, &[20], 0, 100), "the colliding hash is recorded exactly");
        assert!(!m.hold(b, &[20], 0, 100), "and stays idempotent");
        assert!(!m.hold(a, &[10], 0, 100));
        assert_eq!(m.refs(a), Some((0, Refs::One(10))));
        assert_eq!(m.refs(b), Some((0, Refs::One(20))));
        assert_eq!(m.release(a, 0), Some(Refs::One(10)));
        assert_eq!(m.refs(b), Some((0, Refs::One(20))));
        assert_eq!(m.release(b, 0), Some(Refs::One(20)));
        assert_eq!(m.len(), 0);
    }
}
