//! The endpoint store: the current set of endpoints, published as an immutable list that is
//! swapped atomically when discovery changes it, with per-endpoint metrics and models cells
//! written by the scrapers and the models pollers. Readers (`candidates()`) never block writers.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::watch;
use tokio::time::Instant;

use super::model::{Candidate, Endpoint, EndpointId, MetricsState, ServedModels};

/// One endpoint in the store with its metrics cell.
#[derive(Debug)]
pub struct EndpointEntry {
    /// The endpoint.
    pub endpoint: Arc<Endpoint>,
    /// Latest metrics, replaced whole by the scraper.
    pub metrics: ArcSwap<MetricsState>,
    /// Latest `/v1/models` list, replaced whole by the models poller (`None` until the
    /// first successful poll).
    pub models: ArcSwapOption<ServedModels>,
}

impl EndpointEntry {
    fn new(endpoint: Arc<Endpoint>) -> Self {
        Self { endpoint, metrics: ArcSwap::from_pointee(MetricsState::default()), models: ArcSwapOption::empty() }
    }

    /// The candidate view of this entry at `now`, its metrics judged against `staleness`.
    pub fn candidate(&self, now: Instant, staleness: Duration) -> Candidate {
        let metrics = self.metrics.load_full();
        Candidate {
            endpoint: self.endpoint.clone(),
            metrics_known: metrics.known(now, staleness),
            metrics,
            models: self.models.load_full(),
        }
    }
}

/// The endpoint list at one instant.
#[derive(Debug, Default)]
pub struct EndpointSet {
    /// Entries in discovery order.
    pub entries: Vec<Arc<EndpointEntry>>,
    by_id: HashMap<EndpointId, usize>,
}

impl EndpointSet {
    /// Looks an entry up by id.
    pub fn get(&self, id: &str) -> Option<&Arc<EndpointEntry>> {
        self.by_id.get(id).map(|&i| &self.entries[i])
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no endpoints.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Shared, cheaply clonable endpoint store.
#[derive(Clone, Debug)]
pub struct EndpointStore {
    current: Arc<ArcSwap<EndpointSet>>,
    changes: watch::Sender<u64>,
    metrics_changes: watch::Sender<u64>,
    staleness: Duration,
}

impl Default for EndpointStore {
    fn default() -> Self {
        Self::new()
    }
}

impl EndpointStore {
    /// An empty store.
    pub fn new() -> Self {
        let (changes, _) = watch::channel(0);
        let (metrics_changes, _) = watch::channel(0);
        Self {
            current: Arc::new(ArcSwap::from_pointee(EndpointSet::default())),
            changes,
            metrics_changes,
            staleness: super::model::DEFAULT_STALENESS_THRESHOLD,
        }
    }

    /// An empty store whose candidates count metrics older than `staleness` as unknown
    /// (`--metrics-staleness-threshold`).
    pub fn with_staleness_threshold(staleness: Duration) -> Self {
        Self { staleness, ..Self::new() }
    }

    /// The metrics staleness threshold.
    pub fn staleness_threshold(&self) -> Duration {
        self.staleness
    }

    /// The current set (cheap; an `Arc` clone).
    pub fn snapshot(&self) -> Arc<EndpointSet> {
        self.current.load_full()
    }

    /// Candidates for a request: every endpoint with its current metrics.
    pub fn candidates(&self) -> Vec<Candidate> {
        let now = Instant::now();
        self.current.load().entries.iter().map(|e| e.candidate(now, self.staleness)).collect()
    }

    /// Generation counter: increases whenever the endpoint list changes.
    pub fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Subscribes to changes of the endpoint list (the value is a generation counter).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Subscribes to metric updates (a barrier for tests and background consumers: the value
    /// increases after every scrape result is stored).
    pub fn subscribe_metrics(&self) -> watch::Receiver<u64> {
        self.metrics_changes.subscribe()
    }

    /// Stores a scrape result for `entry` and notifies metric subscribers.
    pub fn publish_metrics(&self, entry: &EndpointEntry, state: MetricsState) {
        entry.metrics.store(Arc::new(state));
        self.metrics_changes.send_modify(|g| *g += 1);
    }

    /// Stores a `/v1/models` result for `entry` and notifies metric subscribers (the same
    /// barrier: "something an endpoint reported was stored").
    pub fn publish_models(&self, entry: &EndpointEntry, models: ServedModels) {
        entry.models.store(Some(Arc::new(models)));
        self.metrics_changes.send_modify(|g| *g += 1);
    }

    /// Replaces the endpoint list. Entries whose endpoint is unchanged keep their metrics
    /// cell, so a reload does not make known endpoints look unscraped. Returns what changed.
    pub fn replace(&self, endpoints: Vec<Endpoint>) -> StoreDiff {
        let old = self.current.load_full();
        let mut diff = StoreDiff::default();
        let mut entries = Vec::with_capacity(endpoints.len());
        let mut by_id = HashMap::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let entry = match old.get(&endpoint.id) {
                Some(prev) if *prev.endpoint == endpoint => prev.clone(),
                Some(_) => {
                    diff.updated.push(endpoint.id.clone());
                    Arc::new(EndpointEntry::new(Arc::new(endpoint)))
                }
                None => {
                    diff.added.push(endpoint.id.clone());
                    Arc::new(EndpointEntry::new(Arc::new(endpoint)))
                }
            };
            by_id.insert(entry.endpoint.id.clone(), entries.len());
            entries.push(entry);
        }
        for entry in &old.entries {
            if !by_id.contains_key(&entry.endpoint.id) {
                diff.removed.push(entry.endpoint.id.clone());
            }
        }
        self.current.store(Arc::new(EndpointSet { entries, by_id }));
        if !diff.is_empty() {
            self.changes.send_modify(|g| *g += 1);
        }
        diff
    }
}

/// What a `replace` changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StoreDiff {
    /// New ids.
    pub added: Vec<EndpointId>,
    /// Ids whose address, port or labels changed.
    pub updated: Vec<EndpointId>,
    /// Ids no longer present.
    pub removed: Vec<EndpointId>,
}

impl StoreDiff {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.updated.is_empty() && self.removed.is_empty()
    }

    /// One line per added endpoint (info) and per removed one (debug), with the Go EPPs'
    /// messages and keys (`Pod added` / `name`, `Removing endpoint` / `endpoint`).
    pub fn log(&self) {
        for id in &self.added {
            tracing::info!(name = %id, "Pod added");
        }
        for id in &self.removed {
            tracing::debug!(endpoint = %id, "Removing endpoint");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn ep(name: &str, last: u8) -> Endpoint {
        Endpoint::new(name, IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)), 8000)
    }

    #[test]
    fn replace_reports_diff_and_keeps_unchanged_cells() {
        let store = EndpointStore::new();
        let diff = store.replace(vec![ep("a", 1), ep("b", 2)]);
        assert_eq!(diff.added.len(), 2);
        let cell_a = store.snapshot().get("a").unwrap().clone();
        let diff = store.replace(vec![ep("a", 1), ep("c", 3)]);
        assert_eq!(diff.added, vec![EndpointId::from("c")]);
        assert_eq!(diff.removed, vec![EndpointId::from("b")]);
        assert!(Arc::ptr_eq(&cell_a, store.snapshot().get("a").unwrap()));
        let diff = store.replace(vec![ep("a", 9), ep("c", 3)]);
        assert_eq!(diff.updated, vec![EndpointId::from("a")]);
    }

    #[test]
    fn candidates_follow_the_list_order() {
        let store = EndpointStore::new();
        store.replace(vec![ep("x", 1), ep("y", 2)]);
        let ids: Vec<_> = store.candidates().iter().map(|c| c.id().to_string()).collect();
        assert_eq!(ids, ["x", "y"]);
    }
}
