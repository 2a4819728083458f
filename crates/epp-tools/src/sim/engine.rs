//! The discrete-event loop of one run (one policy over one request stream): a min-heap of
//! timed events (arrival, pod step, KV-event delivery, load publication), ties in insertion
//! order, so an in-process run is a pure function of its inputs and seed.
//!
//! On arrival the `Fabric` picks a pod; a pod with work steps back to back (`pod::Pod::step`
//! gives the duration); each step's KV events are published through the fabric (in process:
//! the `channel` with its delay, jitter, loss and gap purge) and delivered when it says;
//! every `scrape_interval` the pods' load is handed to the fabric, as a scrape would see it.
//! The fabric also paces the loop (`advance_to`): wire mode keeps simulated time in step
//! with the wall clock.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::channel::{ChannelConfig, ChannelStats, Delivery};
use super::pod::{Pod, PodConfig};
use super::router::{Policy, RouteError};
use super::workload::SimRequest;
use epp::kvcache::events::{EventBatch, KvEvent};

/// Fleet settings of a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FleetConfig {
    /// Number of pods.
    pub pods: usize,
    /// Engine settings of each pod.
    pub pod: PodConfig,
    /// The KV-event path: delay, jitter and loss between a step's end and the index.
    pub events: ChannelConfig,
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
    /// Identity of the prompt's first block (its prefix group).
    pub group: u64,
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
    /// The KV-event path's counters (all zero for policies without an index).
    pub channel: ChannelStats,
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
    Deliver(usize, u64, EventBatch),
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

/// Where a run's routing decisions, KV events and load signals go: epp's scheduler in
/// process (`inproc::InProcess`) or a real epp on loopback (`wire`).
pub trait Fabric {
    /// Picks a pod for `req`; also returns the wall time of the decision in seconds.
    fn route(&mut self, req: &SimRequest, pods: &[Pod]) -> Result<(usize, f64), RouteError>;
    /// Whether the policy consumes KV events (false: the engine does not publish them).
    fn wants_events(&self) -> bool;
    /// A pod's batch of a step that ended at `end`: when it should be delivered and its
    /// sequence number, or `None` when it is lost on the way.
    fn publish(&mut self, pod: usize, end: f64) -> Option<Delivery>;
    /// Delivers a batch published earlier.
    fn deliver(&mut self, pod: usize, seq: u64, batch: EventBatch);
    /// Makes every pod's current load visible to the router, as a scrape would.
    fn publish_load(&mut self, pods: &[Pod]);
    /// Called before the event at simulated time `at` is processed (wire mode waits for
    /// the wall clock to catch up; in process it returns at once).
    fn advance_to(&mut self, at: f64);
    /// The KV-event path's counters.
    fn channel_stats(&self) -> ChannelStats;
}

/// Runs `policy` over `requests` on a fresh fleet, routing through `fabric`. `progress` is
/// called after every routed request.
pub fn run(
    policy: Policy,
    fabric: &mut dyn Fabric,
    fleet: &FleetConfig,
    requests: &[SimRequest],
    progress: &mut dyn FnMut(Progress),
) -> Result<RunResult, RouteError> {
    let mut pods: Vec<Pod> = (0..fleet.pods)
        .map(|_| {
            let mut pod = Pod::new(fleet.pod);
            pod.set_records_events(fabric.wants_events());
            pod
        })
        .collect();
    let mut stepping = vec![false; fleet.pods];
    let mut records: Vec<RequestRecord> = requests
        .iter()
        .map(|r| RequestRecord {
            arrival: r.arrival,
            prompt_tokens: r.prompt.len(),
            output_tokens: r.output_len,
            group: super::kv::block_hash(None, &r.prompt[..r.prompt.len().min(fleet.pod.block_size)]),
            ..Default::default()
        })
        .collect();
    let mut decision_seconds = Vec::with_capacity(requests.len());
    let mut ev = Loop { heap: BinaryHeap::new(), seq: 0 };
    for (i, r) in requests.iter().enumerate() {
        ev.push(r.arrival, Event::Arrival(i));
    }
    fabric.publish_load(&pods);
    ev.push(fleet.scrape_interval, Event::Scrape);
    let (mut routed, mut finished) = (0, 0);
    while let Some(Timed { at: now, event, .. }) = ev.heap.pop() {
        fabric.advance_to(now);
        match event {
            Event::Arrival(i) => {
                let (p, seconds) = fabric.route(&requests[i], &pods)?;
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
                if fabric.wants_events()
                    && !out.events.is_empty()
                    && let Some(d) = fabric.publish(p, end)
                {
                    ev.push(d.at, Event::Deliver(p, d.seq, batch(end, out.events)));
                }
                if pods[p].has_work() {
                    ev.push(end, Event::Step(p));
                } else {
                    stepping[p] = false;
                }
            }
            Event::Deliver(p, seq, b) => fabric.deliver(p, seq, b),
            Event::Scrape => {
                fabric.publish_load(&pods);
                if finished < requests.len() {
                    ev.push(now + fleet.scrape_interval, Event::Scrape);
                }
            }
        }
    }
    let evictions = pods.iter().map(Pod::evictions).sum();
    Ok(RunResult { policy, records, decision_seconds, evictions, channel: fabric.channel_stats() })
}

fn batch(ts: f64, events: Vec<KvEvent>) -> EventBatch {
    EventBatch { ts, events, data_parallel_rank: None, unknown_events: 0 }
}
