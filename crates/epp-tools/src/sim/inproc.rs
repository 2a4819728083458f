//! The in-process fabric: epp's scheduler (`router::Router`) over an `EndpointStore` whose
//! metrics cells the simulator writes directly, and the precise producer's index fed through
//! the faulty KV-event `channel`. No sockets, no wall-clock waits.

use std::sync::Arc;

use super::channel::{Channel, ChannelStats, Delivery};
use super::engine::{Fabric, FleetConfig};
use super::pod::Pod;
use super::router::{MODEL, Policy, RouteError, Router, pod_name};
use super::workload::SimRequest;
use epp::endpoints::model::MetricsState;
use epp::endpoints::store::EndpointStore;
use epp::endpoints::vllm_metrics::PodMetrics;
use epp::framework::handles::RandomSource;
use epp::kvcache::events::EventBatch;

/// Routing, KV events and load for one in-process run.
#[derive(Debug)]
pub struct InProcess {
    store: EndpointStore,
    router: Router,
    channel: Channel,
    fleet: FleetConfig,
}

impl InProcess {
    /// A fresh store of `fleet.pods` endpoints (`pod-{i}`) and `policy` over it; `seed`
    /// fixes the KV-event path's jitter and loss and, through one seeded `RandomSource`
    /// shared by every picker of the build, the pickers' tie-breaks.
    pub fn new(policy: Policy, fleet: &FleetConfig, seed: u64) -> Result<Self, RouteError> {
        let store = EndpointStore::new();
        // `pod-{i}`, the names `router::pod_name` gives.
        store.replace(crate::bench::synthetic::endpoints(fleet.pods));
        let router = Router::new(policy, store.clone(), fleet.pod.block_size, RandomSource::seeded(seed))?;
        Ok(Self { store, router, channel: Channel::new(fleet.events, fleet.pods, seed), fleet: fleet.clone() })
    }
}

impl Fabric for InProcess {
    fn route(&mut self, req: &SimRequest, pods: &[Pod]) -> Result<(usize, f64), RouteError> {
        self.router.route(req, pods)
    }

    fn wants_events(&self) -> bool {
        self.router.kv_index().is_some()
    }

    fn publish(&mut self, pod: usize, end: f64) -> Option<Delivery> {
        self.channel.publish(pod, end)
    }

    fn deliver(&mut self, pod: usize, seq: u64, batch: EventBatch) {
        if let Some(index) = self.router.kv_index() {
            self.channel.deliver(index, pod, &pod_name(pod), MODEL, seq, &batch);
        }
    }

    fn publish_load(&mut self, pods: &[Pod]) {
        publish_load(&self.store, pods, &self.fleet);
    }

    fn advance_to(&mut self, _at: f64) {}

    fn channel_stats(&self) -> ChannelStats {
        self.channel.stats()
    }
}

/// Writes every pod's load into `store`, stamped now (the scorers check freshness against
/// real time).
pub fn publish_load(store: &EndpointStore, pods: &[Pod], fleet: &FleetConfig) {
    let snapshot = store.snapshot();
    for (i, pod) in pods.iter().enumerate() {
        let Some(entry) = snapshot.get(&pod_name(i)) else { continue };
        entry.metrics.store(Arc::new(MetricsState {
            metrics: pod_metrics(pod, fleet),
            updated_at: Some(tokio::time::Instant::now()),
            last_scrape_failed: false,
            invalid: false,
        }));
    }
}

/// What a scrape of `pod` reports.
pub fn pod_metrics(pod: &Pod, fleet: &FleetConfig) -> PodMetrics {
    let load = pod.load();
    PodMetrics {
        waiting_queue_size: load.waiting as u64,
        running_requests: load.running as u64,
        kv_cache_usage: load.kv_usage,
        cache_block_size: Some(fleet.pod.block_size as u32),
        cache_num_blocks: Some(fleet.pod.kv_blocks as u64),
        ..Default::default()
    }
}
