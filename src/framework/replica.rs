//! The hooks between stateful plugins and cross-replica state sharing (`crate::replica`,
//! docs/replicas.md). A plugin that learns from its decisions publishes a [`SharedUpdate`]
//! through the [`ReplicaHandle`] it got from `BuildContext`, and registers a [`SharedState`]
//! that applies the updates other replicas published. The handle is a no-op when sharing is
//! off (the default), so plugins need no branch of their own. Publishing never blocks: the
//! link behind the handle queues or drops.
//!
//! [`RemoteLoads`] is the per-replica in-flight bookkeeping the in-flight producer keeps for
//! other replicas (deltas, absolute totals replacing them, forgetting a silent replica).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::plugin::PluginName;
use crate::endpoints::model::EndpointId;

/// One thing a replica learned and the others should know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharedUpdate {
    /// Approximate-prefix entries recorded for a pick: `endpoint` now holds `keys`.
    PrefixRecorded {
        /// The endpoint.
        endpoint: EndpointId,
        /// Block keys in prompt order.
        keys: Arc<[u64]>,
    },
    /// Speculative entries: `endpoint` is about to hold `keys` (expire after the local TTL).
    Speculative {
        /// The endpoint.
        endpoint: EndpointId,
        /// Block keys in prompt order.
        keys: Arc<[u64]>,
    },
    /// A change of the publisher's in-flight load on an endpoint.
    InFlightDelta {
        /// The endpoint.
        endpoint: EndpointId,
        /// Requests added (negative: released).
        requests: i64,
        /// Tokens added (negative: released).
        tokens: i64,
    },
    /// The publisher's whole in-flight load: replaces what was known of it.
    InFlightTotals {
        /// (endpoint, requests, tokens) for every endpoint with something in flight.
        loads: Vec<(EndpointId, u64, u64)>,
    },
    /// A session bound to an endpoint.
    SessionBound {
        /// Session id as the client sent it.
        session: String,
        /// The endpoint.
        endpoint: EndpointId,
    },
}

/// Where an update came from.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The publishing replica's id.
    pub replica: &'a str,
    /// Time since it was published (publisher's clock against ours; zero if in the future).
    pub age: Duration,
}

/// One update another replica published, with where it came from.
#[derive(Clone, Copy, Debug)]
pub struct Remote<'a> {
    /// Its publisher and age.
    pub origin: Origin<'a>,
    /// The update.
    pub update: &'a SharedUpdate,
}

/// A plugin's side of sharing: applies other replicas' updates. Called from the sync task,
/// never from a decision; must take only short locks.
pub trait SharedState: Send + Sync + fmt::Debug {
    /// Applies an update another replica published for this plugin instance.
    fn apply(&self, origin: Origin<'_>, update: &SharedUpdate);

    /// Applies a run of updates for this plugin instance, in stream order (one stream entry
    /// holds many). The default applies them one by one; a plugin overrides it to share
    /// per-call work (snapshots, gauges) across the run.
    fn apply_batch(&self, updates: &[Remote<'_>]) {
        for remote in updates {
            self.apply(remote.origin, remote.update);
        }
    }

    /// Updates to publish with every heartbeat (absolute state; default: none).
    fn heartbeat(&self) -> Vec<SharedUpdate> {
        Vec::new()
    }

    /// Forgets what `replica` contributed (it went silent).
    fn forget_replica(&self, _replica: &str) {}
}

/// The sync side, implemented by `crate::replica`.
pub trait ReplicaLink: Send + Sync + fmt::Debug {
    /// Queues an update of plugin `plugin`; never blocks (drops and counts when full).
    fn publish(&self, plugin: &PluginName, update: SharedUpdate);

    /// Registers the state that applies remote updates for `plugin`.
    fn register(&self, plugin: PluginName, state: Weak<dyn SharedState>);
}

/// What factories hand stateful plugins: a link to the other replicas, or nothing.
#[derive(Clone, Debug, Default)]
pub struct ReplicaHandle(Option<Arc<dyn ReplicaLink>>);

impl ReplicaHandle {
    /// A handle publishing through `link`.
    pub fn new(link: Arc<dyn ReplicaLink>) -> Self {
        Self(Some(link))
    }

    /// True when sharing is on.
    pub fn is_enabled(&self) -> bool {
        self.0.is_some()
    }

    /// Publishes the update `make` builds (only called when sharing is on).
    pub fn publish(&self, plugin: &PluginName, make: impl FnOnce() -> SharedUpdate) {
        if let Some(link) = &self.0 {
            link.publish(plugin, make());
        }
    }

    /// Registers `state` for `plugin` (no-op when sharing is off).
    pub fn register<S: SharedState + 'static>(&self, plugin: &PluginName, state: &Arc<S>) {
        if let Some(link) = &self.0 {
            let state: Arc<dyn SharedState> = state.clone();
            link.register(plugin.clone(), Arc::downgrade(&state));
        }
    }
}

/// Other replicas' in-flight loads: one counter set per replica, and their sum per endpoint.
#[derive(Debug, Default)]
pub struct RemoteLoads {
    inner: Mutex<RemoteInner>,
}

#[derive(Debug, Default)]
struct RemoteInner {
    by_replica: HashMap<Arc<str>, HashMap<EndpointId, (u64, u64)>>,
    total: HashMap<EndpointId, (u64, u64)>,
}

impl RemoteInner {
    fn recount(&mut self, endpoint: &EndpointId) {
        let sum = self
            .by_replica
            .values()
            .filter_map(|m| m.get(endpoint))
            .fold((0u64, 0u64), |(r, t), (dr, dt)| (r.saturating_add(*dr), t.saturating_add(*dt)));
        if sum == (0, 0) {
            self.total.remove(endpoint);
        } else {
            self.total.insert(endpoint.clone(), sum);
        }
    }
}

fn shift(value: u64, delta: i64) -> u64 {
    if delta >= 0 { value.saturating_add(delta.unsigned_abs()) } else { value.saturating_sub(delta.unsigned_abs()) }
}

impl RemoteLoads {
    fn lock(&self) -> MutexGuard<'_, RemoteInner> {
        // Counters stay usable after a panic elsewhere: at worst one update is half applied.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// (requests, tokens) other replicas have in flight on `endpoint`.
    pub fn load(&self, endpoint: &str) -> (u64, u64) {
        self.lock().total.get(endpoint).copied().unwrap_or((0, 0))
    }

    /// Applies a delta of `replica` (counters never go below zero).
    pub fn apply_delta(&self, replica: &str, endpoint: &EndpointId, requests: i64, tokens: i64) {
        let mut inner = self.lock();
        let counters = match inner.by_replica.get_mut(replica) {
            Some(c) => c,
            None => inner.by_replica.entry(Arc::from(replica)).or_default(),
        };
        let slot = counters.entry(endpoint.clone()).or_insert((0, 0));
        *slot = (shift(slot.0, requests), shift(slot.1, tokens));
        if *slot == (0, 0) {
            counters.remove(endpoint);
        }
        inner.recount(endpoint);
    }

    /// Replaces everything known of `replica` by its totals.
    pub fn replace(&self, replica: &str, loads: &[(EndpointId, u64, u64)]) {
        let mut inner = self.lock();
        let fresh: HashMap<EndpointId, (u64, u64)> =
            loads.iter().filter(|(_, r, t)| (*r, *t) != (0, 0)).map(|(e, r, t)| (e.clone(), (*r, *t))).collect();
        let old = inner.by_replica.insert(Arc::from(replica), fresh.clone()).unwrap_or_default();
        for endpoint in old.keys().chain(fresh.keys()) {
            inner.recount(endpoint);
        }
    }

    /// Drops `replica`'s contribution.
    pub fn forget(&self, replica: &str) {
        let mut inner = self.lock();
        if let Some(old) = inner.by_replica.remove(replica) {
            for endpoint in old.keys() {
                inner.recount(endpoint);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_loads_sum_replicas_and_totals_replace_deltas() {
        let loads = RemoteLoads::default();
        let a: EndpointId = "pod-a".into();
        loads.apply_delta("r1", &a, 1, 100);
        loads.apply_delta("r2", &a, 2, 50);
        assert_eq!(loads.load("pod-a"), (3, 150));
        loads.apply_delta("r1", &a, -5, -500);
        assert_eq!(loads.load("pod-a"), (2, 50), "never below zero");
        loads.replace("r2", &[(a.clone(), 7, 70)]);
        assert_eq!(loads.load("pod-a"), (7, 70));
        loads.forget("r2");
        assert_eq!(loads.load("pod-a"), (0, 0));
        assert!(loads.lock().total.is_empty() && loads.lock().by_replica.get("r1").is_none_or(|m| m.is_empty()));
    }

    #[test]
    fn a_disabled_handle_builds_nothing() {
        let handle = ReplicaHandle::default();
        assert!(!handle.is_enabled());
        handle.publish(&PluginName::from("p"), || unreachable!("not built when sharing is off"));
    }
}
