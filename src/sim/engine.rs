//! The discrete-event loop of one run (one policy over one request stream). Simulated time
//! only: a min-heap of timed events (arrival, pod step, KV-event delivery, metrics scrape),
//! ties in insertion order, so a run is a pure function of its inputs and seed.
//!
//! On arrival the router picks a pod; a pod with work steps back to back (`pod::Pod::step`
//! gives the duration); each step's KV events reach the precise producer's index
//! `event_delay` after the step ends; every `scrape_interval` each pod's load is written to
//! the endpoint store, as the scraper would.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::pod::{Pod, PodConfig};
use super::router::{MODEL, Policy, RouteError, Router, pod_name};
use super::workload::SimRequest;
use crate::endpoints::model::MetricsState;
use crate::endpoints::store::EndpointStore;
use crate::endpoints::vllm_metrics::PodMetrics;
use crate::kvcache::events::{EventBatch, EventKind, KvEvent};
use crate::kvcache::index::EventOutcome;

/// Fleet settings of a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FleetConfig {
    /// Number of pods.
    pub pods: usize,
    /// Engine settings of each pod.
    pub pod: PodConfig,
    /// Delay between a step's end and its KV events reaching the index, seconds.
    pub event_delay: f64,
    /// Period of load updates in the endpoint store, seconds.
    pub scrape_interval: f64,
}

/// What happened to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestRecord {
    /// Pod it was routed to.
    pub pod: usize,
    /// Arrival time.
    pub arrival: f64,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens found cached at admission.
    pub cached_tokens: usize,
    /// Output tokens.
    pub output_tokens: usize,
    /// Time of the first output token.
    pub first_token: Option<f64>,
    /// Completion time.
    pub finished: Option<f64>,
}

/// Raw outcome of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// The policy.
    pub policy: Policy,
    /// Per request, by id.
    pub records: Vec<RequestRecord>,
    /// Wall seconds of each routing decision.
    pub decision_seconds: Vec<f64>,
    /// Blocks evicted over all pods.
    pub evictions: u64,
    /// KV events the index did not apply (unknown parent, unknown block, ...).
    pub events_rejected: u64,
}

/// Progress of a run, for live output.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Requests routed so far.
    pub routed: usize,
    /// Requests finished so far.
    pub finished: usize,
    /// Simulated time, seconds.
    pub now: f64,
}

#[derive(Debug)]
enum Event {
    Arrival(usize),
    Step(usize),
    Deliver(usize, EventBatch),
    Scrape,
}

#[derive(Debug)]
struct Timed {
    at: f64,
    seq: u64,
    event: Event,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    /// Reversed: the earliest event is the heap's maximum.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

struct Loop {
    heap: BinaryHeap<Timed>,
    seq: u64,
}

impl Loop {
    fn push(&mut self, at: f64, event: Event) {
        self.seq += 1;
        self.heap.push(Timed { at, seq: self.seq, event });
    }
}

/// Runs `policy` over `requests` on a fresh fleet. `progress` is called after every routed
/// request.
pub fn run(
    policy: Policy,
    fleet: &FleetConfig,
    requests: &[SimRequest],
    progress: &mut dyn FnMut(Progress),
) -> Result<RunResult, RouteError> {
    let store = EndpointStore::new();
    // `pod-{i}`, the names `router::pod_name` gives.
    store.replace(crate::bench::synthetic::endpoints(fleet.pods));
    let mut router = Router::new(policy, store.clone(), fleet.pod.block_size)?;
    let mut pods: Vec<Pod> = (0..fleet.pods).map(|_| Pod::new(fleet.pod)).collect();
    let mut stepping = vec![false; fleet.pods];
    let mut records: Vec<RequestRecord> = requests
        .iter()
        .map(|r| RequestRecord {
            arrival: r.arrival,
            prompt_tokens: r.prompt.len(),
            output_tokens: r.output_len,
            ..Default::default()
        })
        .collect();
    let mut decision_seconds = Vec::with_capacity(requests.len());
    let mut ev = Loop { heap: BinaryHeap::new(), seq: 0 };
    for (i, r) in requests.iter().enumerate() {
        ev.push(r.arrival, Event::Arrival(i));
    }
    publish_load(&store, &pods, fleet);
    ev.push(fleet.scrape_interval, Event::Scrape);
    let (mut routed, mut finished, mut events_rejected) = (0, 0, 0u64);
    while let Some(Timed { at: now, event, .. }) = ev.heap.pop() {
        match event {
            Event::Arrival(i) => {
                let (p, seconds) = router.route(&requests[i], &pods)?;
                decision_seconds.push(seconds);
                records[i].pod = p;
                pods[p].enqueue(requests[i].clone());
                if !stepping[p] {
                    stepping[p] = true;
                    ev.push(now, Event::Step(p));
                }
                routed += 1;
                progress(Progress { routed, finished, now });
            }
            Event::Step(p) => {
                let out = pods[p].step();
                let end = now + out.duration.max(1e-6);
                for (id, cached) in out.admitted {
                    records[id].cached_tokens = cached;
                }
                for id in out.first_tokens {
                    records[id].first_token = Some(end);
                }
                finished += out.finished.len();
                for id in out.finished {
                    records[id].finished = Some(end);
                }
                if router.kv_index().is_some() && !out.events.is_empty() {
                    ev.push(end + fleet.event_delay, Event::Deliver(p, batch(end, out.events)));
                }
                if pods[p].has_work() {
                    ev.push(end, Event::Step(p));
                } else {
                    stepping[p] = false;
                }
            }
            Event::Deliver(p, b) => {
                if let Some(index) = router.kv_index() {
                    let stats = index.apply(&pod_name(p), MODEL, &b);
                    let applied: u32 = [EventKind::Stored, EventKind::Removed, EventKind::Cleared]
                        .into_iter()
                        .map(|k| stats.count(k, EventOutcome::Applied))
                        .sum();
                    events_rejected += (b.events.len() as u64).saturating_sub(applied as u64);
                }
            }
            Event::Scrape => {
                publish_load(&store, &pods, fleet);
                if finished < requests.len() {
                    ev.push(now + fleet.scrape_interval, Event::Scrape);
                }
            }
        }
    }
    let evictions = pods.iter().map(Pod::evictions).sum();
    Ok(RunResult { policy, records, decision_seconds, evictions, events_rejected })
}

fn batch(ts: f64, events: Vec<KvEvent>) -> EventBatch {
    EventBatch { ts, events, data_parallel_rank: None, unknown_events: 0 }
}

/// Writes every pod's load into the store, stamped now (the scorers check freshness
/// against real time).
fn publish_load(store: &EndpointStore, pods: &[Pod], fleet: &FleetConfig) {
    let snapshot = store.snapshot();
    for (i, pod) in pods.iter().enumerate() {
        let Some(entry) = snapshot.get(&pod_name(i)) else { continue };
        let load = pod.load();
        let metrics = PodMetrics {
            waiting_queue_size: load.waiting as u64,
            running_requests: load.running as u64,
            kv_cache_usage: load.kv_usage,
            cache_block_size: Some(fleet.pod.block_size as u32),
            cache_num_blocks: Some(fleet.pod.kv_blocks as u64),
            ..Default::default()
        };
        entry.metrics.store(Arc::new(MetricsState {
            metrics,
            updated_at: Some(tokio::time::Instant::now()),
            last_scrape_failed: false,
        }));
    }
}
