//! Speculative entries (`speculativeIndexing`): right after epp routes a
//! request, the endpoint is going to hold that prompt's blocks, but its KV
//! events arrive only once prefill ran. Until then a burst of requests with the
//! same prefix would scatter. The ledger adds the request's keys to the chosen
//! endpoint under [`Tier::Speculative`] at once and takes them out again after
//! the TTL, as llm-d does.
//!
//! Speculative holders are refcounted like any other: two requests speculating
//! the same block on the same endpoint hold two references, and each expiry
//! releases one. They live beside the engine's own tiers, so a real
//! `BlockStored` neither extends nor cuts them, and a purge (`AllBlocksCleared`,
//! restart, gap, endpoint removal) drops them with everything else. Expiry is
//! driven by the caller's clock (`now`), which keeps the ledger testable
//! without waiting.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::events::Tier;
use super::index::{AddMode, PrefixIndex, RemoveMode};

/// Most pending speculations kept; beyond it the oldest expire early.
const MAX_PENDING: usize = 1 << 20;

#[derive(Debug)]
struct Pending {
    deadline: Instant,
    endpoint: Arc<str>,
    keys: Arc<[u64]>,
}

/// What one call changed, in blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpeculativeChange {
    /// Blocks added.
    pub added: usize,
    /// Blocks whose speculation expired.
    pub expired: usize,
}

/// Pending speculative entries in deadline order (the TTL is fixed, so
/// insertion order is deadline order).
#[derive(Debug)]
pub struct SpeculativeLedger {
    ttl: Duration,
    pending: Mutex<VecDeque<Pending>>,
}

impl SpeculativeLedger {
    /// A ledger whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        SpeculativeLedger { ttl, pending: Mutex::new(VecDeque::new()) }
    }

    /// Lifetime of an entry.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Expires what is due at `now`, then adds `keys` to `endpoint` until `now + ttl`.
    pub fn record(
        &self,
        index: &PrefixIndex,
        endpoint: &Arc<str>,
        keys: &Arc<[u64]>,
        now: Instant,
    ) -> SpeculativeChange {
        let mut change = self.expire(index, now);
        if keys.is_empty() {
            return change;
        }
        index.store_keys(endpoint, Tier::Speculative, keys, AddMode::Counted);
        change.added = keys.len();
        let mut pending = self.lock();
        pending.push_back(Pending { deadline: now + self.ttl, endpoint: endpoint.clone(), keys: keys.clone() });
        while pending.len() > MAX_PENDING {
            if let Some(p) = pending.pop_front() {
                change.expired += release(index, &p);
            }
        }
        change
    }

    /// Releases every speculation whose deadline is at or before `now`.
    pub fn expire(&self, index: &PrefixIndex, now: Instant) -> SpeculativeChange {
        let mut expired = 0;
        loop {
            // Pop under the lock, release outside it: removals take shard locks.
            let due = {
                let mut pending = self.lock();
                match pending.front() {
                    Some(p) if p.deadline <= now => pending.pop_front(),
                    _ => None,
                }
            };
            match due {
                Some(p) => expired += release(index, &p),
                None => return SpeculativeChange { added: 0, expired },
            }
        }
    }

    /// Speculations not yet expired.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn release(index: &PrefixIndex, p: &Pending) -> usize {
    index.remove_keys(&p.endpoint, Tier::Speculative, &p.keys, RemoveMode::Release);
    p.keys.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::index::IndexConfig;

    fn keys(v: &[u64]) -> Arc<[u64]> {
        v.iter().copied().collect()
    }

    fn blocks(index: &PrefixIndex, endpoint: &str, k: &[u64]) -> usize {
        index.lookup(k).iter().find(|m| &*m.endpoint == endpoint).map_or(0, |m| m.blocks)
    }

    #[test]
    fn entries_match_until_the_ttl_then_vanish() {
        let index = PrefixIndex::new(IndexConfig::default());
        let ledger = SpeculativeLedger::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let a: Arc<str> = "a".into();
        let k = keys(&[11, 12, 13]);
        assert_eq!(ledger.record(&index, &a, &k, t0), SpeculativeChange { added: 3, expired: 0 });
        assert_eq!(blocks(&index, "a", &k), 3);
        let m = &index.lookup(&k)[0];
        assert_eq!(m.weighted, 3.0, "speculative blocks weigh 1.0");
        assert_eq!(ledger.expire(&index, t0 + Duration::from_millis(1999)).expired, 0);
        assert_eq!(ledger.expire(&index, t0 + Duration::from_secs(2)).expired, 3);
        assert_eq!(blocks(&index, "a", &k), 0);
        assert_eq!(index.entries(), 0);
        assert_eq!(ledger.pending(), 0);
    }

    #[test]
    fn overlapping_speculations_are_refcounted() {
        let index = PrefixIndex::new(IndexConfig::default());
        let ledger = SpeculativeLedger::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let a: Arc<str> = "a".into();
        ledger.record(&index, &a, &keys(&[1, 2]), t0);
        ledger.record(&index, &a, &keys(&[1, 2, 3]), t0 + Duration::from_millis(500));
        // The first expires; blocks 1 and 2 are still held by the second.
        let c = ledger.expire(&index, t0 + Duration::from_millis(1200));
        assert_eq!(c.expired, 2);
        assert_eq!(blocks(&index, "a", &[1, 2, 3]), 3);
        ledger.expire(&index, t0 + Duration::from_millis(1500));
        assert_eq!(index.entries(), 0);
    }

    #[test]
    fn real_entries_outlive_speculation_and_purges_drop_it() {
        let index = PrefixIndex::new(IndexConfig::default());
        let ledger = SpeculativeLedger::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let a: Arc<str> = "a".into();
        index.store_keys("a", Tier::Gpu, &[7], AddMode::Counted);
        ledger.record(&index, &a, &keys(&[7, 8]), t0);
        assert_eq!(blocks(&index, "a", &[7, 8]), 2);
        ledger.expire(&index, t0 + Duration::from_secs(1));
        assert_eq!(blocks(&index, "a", &[7, 8]), 1, "the engine's own block stays");
        // A purge takes speculative entries too; their later expiry is harmless.
        ledger.record(&index, &a, &keys(&[9]), t0 + Duration::from_secs(2));
        index.clear_endpoint("a");
        assert_eq!(index.entries(), 0);
        assert_eq!(ledger.expire(&index, t0 + Duration::from_secs(5)).expired, 1);
        assert_eq!(index.entries(), 0);
    }
}
