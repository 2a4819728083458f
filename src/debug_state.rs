//! `/debug/state` on the metrics port: one JSON snapshot of what epp routes on, for an
//! operator asking "why did it pick that pod?". Endpoints with their address and metrics age
//! and state (`fresh`, `stale`, `invalid`, `never_scraped`), prefix-index blocks per endpoint,
//! the KV-event SUB sockets (endpoint or central socket, connected, last message age) and the
//! Flow Control queues by priority. Read-only; built on request from the shared handles.

use std::sync::Arc;
use tokio::time::Instant;

use serde::Serialize;

use crate::endpoints::model::MetricsState;
use crate::endpoints::store::EndpointStore;
use crate::flowcontrol::FlowController;
use crate::flowcontrol::queue::BandLoad;
use crate::kvcache::KvCacheMetrics;
use crate::kvcache::board::SubscriptionView;

/// What `/debug/state` reads.
#[derive(Clone, Debug)]
pub struct StateSources {
    /// The endpoint store (the staleness threshold comes with it).
    pub store: EndpointStore,
    /// The KV-event boards (sockets and indexes).
    pub kv: Arc<KvCacheMetrics>,
    /// Flow Control, when the gate is on.
    pub flow_control: Option<Arc<FlowController>>,
}

/// The `/debug/state` document.
#[derive(Debug, Serialize)]
pub struct State {
    /// Endpoints, in store order.
    pub endpoints: Vec<EndpointState>,
    /// Blocks per endpoint in the prefix indexes (empty without a precise prefix producer).
    pub prefix_index_blocks: std::collections::BTreeMap<String, u64>,
    /// KV-event SUB sockets.
    pub kv_event_subscriptions: Vec<SubscriptionView>,
    /// Flow Control (`null` when the gate is off).
    pub flow_control: Option<FlowControlState>,
}

/// One endpoint.
#[derive(Debug, Serialize)]
pub struct EndpointState {
    /// Endpoint name.
    pub name: String,
    /// `ip:port` requests go to.
    pub address: String,
    /// `fresh` (used for load), `stale` (no successful scrape within the threshold),
    /// `invalid` (the last scrape had unusable values) or `never_scraped`.
    pub metrics_state: &'static str,
    /// Seconds since the last successful scrape (`null`: never).
    pub metrics_age_seconds: Option<f64>,
    /// Whether the most recent scrape failed.
    pub last_scrape_failed: bool,
    /// Requests waiting in the engine at the last scrape.
    pub waiting_requests: u64,
    /// Requests running at the last scrape.
    pub running_requests: u64,
    /// KV-cache usage (0..1) at the last scrape.
    pub kv_cache_usage: f64,
}

/// Flow Control queues.
#[derive(Debug, Serialize)]
pub struct FlowControlState {
    /// Requests waiting in all bands.
    pub queued_requests: u64,
    /// Per priority band, highest first.
    pub bands: Vec<BandLoad>,
}

fn metrics_state(m: &MetricsState, now: Instant, staleness: std::time::Duration) -> &'static str {
    if m.updated_at.is_none() {
        "never_scraped"
    } else if m.invalid {
        "invalid"
    } else if m.is_stale(now, staleness) {
        "stale"
    } else {
        "fresh"
    }
}

impl StateSources {
    /// The document now.
    pub fn snapshot(&self) -> State {
        let now = Instant::now();
        let staleness = self.store.staleness_threshold();
        let endpoints = self
            .store
            .snapshot()
            .entries
            .iter()
            .map(|entry| {
                let m = entry.metrics.load();
                EndpointState {
                    name: entry.endpoint.id.to_string(),
                    address: entry.endpoint.host_port.to_string(),
                    metrics_state: metrics_state(&m, now, staleness),
                    metrics_age_seconds: m.updated_at.map(|at| now.saturating_duration_since(at).as_secs_f64()),
                    last_scrape_failed: m.last_scrape_failed,
                    waiting_requests: m.metrics.waiting_queue_size,
                    running_requests: m.metrics.running_requests,
                    kv_cache_usage: m.metrics.kv_cache_usage,
                }
            })
            .collect();
        State {
            endpoints,
            prefix_index_blocks: self.kv.indexes.blocks_by_endpoint(),
            kv_event_subscriptions: self.kv.subscriptions.snapshot(),
            flow_control: self
                .flow_control
                .as_ref()
                .map(|fc| FlowControlState { queued_requests: fc.queued(), bands: fc.bands() }),
        }
    }

    /// The document as JSON (`Null` if it cannot be encoded, which plain data cannot fail).
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self.snapshot()).unwrap_or_default()
    }
}
