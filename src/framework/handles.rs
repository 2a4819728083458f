//! Shared handles a build hands to its plugins, beyond the endpoint store and the metric
//! families: the `RandomSource` pickers draw from and the `IndexRegistry` where plugins that
//! own a KV-event prefix index offer it to in-process drivers (the fleet simulator). Both are
//! cheap to clone; clones share the same state, so every plugin of one build sees one
//! generator and one registry.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::plugin::PluginName;
use crate::kvcache::PrefixIndex;

/// Where random draws come from. Unseeded (the default) it is the thread RNG, as a server
/// wants; seeded, every clone draws in turn from one `StdRng`, so a single-threaded driver
/// that makes the same calls in the same order gets the same draws.
#[derive(Clone, Default)]
pub struct RandomSource {
    seeded: Option<Arc<Mutex<StdRng>>>,
}

impl RandomSource {
    /// The thread RNG (what `Default` gives).
    pub fn thread() -> Self {
        Self::default()
    }

    /// One generator seeded with `seed`, shared by every clone.
    pub fn seeded(seed: u64) -> Self {
        Self { seeded: Some(Arc::new(Mutex::new(StdRng::seed_from_u64(seed)))) }
    }

    /// Whether this source is seeded.
    pub fn is_seeded(&self) -> bool {
        self.seeded.is_some()
    }

    /// Runs `f` with the generator.
    pub fn with<T>(&self, f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
        match &self.seeded {
            Some(rng) => f(&mut *lock(rng)),
            None => f(&mut rand::rng()),
        }
    }
}

impl fmt::Debug for RandomSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RandomSource").field("seeded", &self.is_seeded()).finish()
    }
}

/// Prefix indexes offered by the plugins of one build, in build order, under the instance
/// name of the plugin that owns each. The server never reads it; in-process drivers do, to
/// feed KV events straight into the index the scheduler looks up.
#[derive(Clone, Debug, Default)]
pub struct IndexRegistry {
    indexes: Arc<Mutex<Vec<OwnedIndex>>>,
}

/// A registered index and the instance name of the plugin owning it.
pub type OwnedIndex = (PluginName, Arc<PrefixIndex>);

impl IndexRegistry {
    /// Offers `index`, owned by plugin `owner`.
    pub fn register(&self, owner: PluginName, index: Arc<PrefixIndex>) {
        lock(&self.indexes).push((owner, index));
    }

    /// Every registered index with its owner, in registration order.
    pub fn prefix_indexes(&self) -> Vec<OwnedIndex> {
        lock(&self.indexes).clone()
    }

    /// The first registered index, if any.
    pub fn first_prefix_index(&self) -> Option<Arc<PrefixIndex>> {
        lock(&self.indexes).first().map(|(_, index)| index.clone())
    }
}

/// Locks `m`, taking the data over from a holder that panicked: both values stay valid
/// after any partial update (a generator state, a list push).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_clones_share_one_sequence() {
        let draws =
            |source: &RandomSource, n: usize| -> Vec<u64> { (0..n).map(|_| source.with(|r| r.next_u64())).collect() };
        let a = RandomSource::seeded(7);
        let b = a.clone();
        let interleaved: Vec<u64> =
            (0..4).map(|i| if i % 2 == 0 { &a } else { &b }).map(|s| s.with(|r| r.next_u64())).collect();
        assert_eq!(interleaved, draws(&RandomSource::seeded(7), 4));
        assert!(!RandomSource::thread().is_seeded());
    }

    #[test]
    fn registry_clones_see_registrations_in_order() {
        let registry = IndexRegistry::default();
        assert!(registry.first_prefix_index().is_none());
        let first = Arc::new(PrefixIndex::new(Default::default()));
        let view = registry.clone();
        registry.register(PluginName::from("a"), first.clone());
        registry.register(PluginName::from("b"), Arc::new(PrefixIndex::new(Default::default())));
        let names: Vec<String> = view.prefix_indexes().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(Arc::ptr_eq(&view.first_prefix_index().expect("registered"), &first));
    }
}
