//! The Flow Control controller: `enqueue_and_wait` parks a request in the queues until the
//! dispatch loop releases it, its TTL expires, or its caller goes away (dropping the future
//! removes it). The dispatch loop runs on every arrival and every millisecond while anything
//! waits; each cycle computes the pool's saturation with the configured detector and
//! releases requests in strict priority order while saturation stays below the ceiling. A
//! saturated cycle stops at the highest-priority head, so lower bands never overtake it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Outcome;
use super::metrics::{FlowControlMetrics, FlowLabels};
use super::policy::SaturationDetector;
use super::queue::{Arrival, EntryId, Queues};
use super::settings::FlowControlSettings;
use crate::endpoints::store::EndpointStore;

/// Dispatch period while requests wait.
const TICK: Duration = Duration::from_millis(1);

/// What the controller needs to know about a request.
#[derive(Clone, Debug, Default)]
pub struct FlowRequest {
    /// Fairness id (`x-gateway-inference-fairness-id`, default `default-flow`).
    pub fairness_id: String,
    /// Priority from the objective.
    pub priority: i32,
    /// Body size, counted against `maxBytes`.
    pub bytes: u64,
    /// Incoming model (metric label).
    pub model: String,
    /// Target model (metric label).
    pub target: String,
    /// The request's TTFT SLO (`slo-deadline-ordering-policy` orders by arrival + this).
    pub slo_ttft: Option<Duration>,
}

/// A parked request: the dispatcher completes it.
#[derive(Debug)]
struct Ticket {
    release: oneshot::Sender<()>,
    labels: FlowLabels,
}

/// Admission control for one pool.
#[derive(Debug)]
pub struct FlowController {
    settings: FlowControlSettings,
    queues: Mutex<Queues<Ticket>>,
    wake: Notify,
    /// Queue length after every change (a barrier for tests and observers).
    length: watch::Sender<u64>,
    store: EndpointStore,
    detector: Option<Arc<dyn SaturationDetector>>,
    metrics: FlowControlMetrics,
}

impl FlowController {
    /// A controller over `store`'s endpoints; without a detector the pool never saturates.
    pub fn new(
        settings: FlowControlSettings,
        store: EndpointStore,
        detector: Option<Arc<dyn SaturationDetector>>,
        metrics: FlowControlMetrics,
    ) -> Self {
        Self {
            settings: settings.clone(),
            queues: Mutex::new(Queues::new(settings)),
            wake: Notify::new(),
            length: watch::Sender::new(0),
            store,
            detector,
            metrics,
        }
    }

    fn queues(&self) -> MutexGuard<'_, Queues<Ticket>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting now.
    pub fn queued(&self) -> u64 {
        self.queues().len()
    }

    /// What waits in each priority band now (highest priority first).
    pub fn bands(&self) -> Vec<super::queue::BandLoad> {
        self.queues().bands()
    }

    /// Follows the number of waiting requests (updated on every change).
    pub fn subscribe_queued(&self) -> watch::Receiver<u64> {
        self.length.subscribe()
    }

    /// Publishes the queue length; called with the queues locked, so updates stay in order.
    fn publish(&self, queues: &Queues<Ticket>) {
        self.length.send_replace(queues.len());
    }

    /// Saturation of the pool now (1.0 for an empty pool, as the detectors define it).
    pub fn saturation(&self) -> f64 {
        match &self.detector {
            Some(d) => d.saturation(&self.store.candidates(), Instant::now()),
            None => 0.0,
        }
    }

    /// Queues the request and waits for its turn. Dropping the future withdraws it.
    pub async fn enqueue_and_wait(&self, request: FlowRequest) -> Outcome {
        let start = Instant::now();
        let labels = self.metrics.labels(&request.fairness_id, request.priority, &request.model, &request.target);
        if self.store.snapshot().is_empty() && !self.wait_for_endpoints(start).await {
            self.metrics.enqueued(&labels, Outcome::RejectedNoEndpoints.name(), start.elapsed().as_secs_f64());
            self.metrics.finished(&labels, Outcome::RejectedNoEndpoints.name(), 0.0);
            return Outcome::RejectedNoEndpoints;
        }
        let (release, mut released) = oneshot::channel();
        let deadline = self.settings.ttl(request.priority).map(|t| start + t);
        let ticket = Ticket { release, labels: labels.clone() };
        let pushed = {
            let mut queues = self.queues();
            let arrival = Arrival {
                flow: &request.fairness_id,
                priority: request.priority,
                bytes: request.bytes,
                deadline,
                slo_deadline: request.slo_ttft.map(|slo| start + slo),
            };
            let pushed = queues.push_arrival(arrival, ticket);
            self.publish(&queues);
            pushed
        };
        let id = match pushed {
            Ok(id) => id,
            Err(e) => {
                let outcome = Outcome::RejectedCapacity(e.to_string());
                self.metrics.enqueued(&labels, outcome.name(), start.elapsed().as_secs_f64());
                self.metrics.finished(&labels, outcome.name(), 0.0);
                return outcome;
            }
        };
        self.metrics.enqueued(&labels, "Enqueued", start.elapsed().as_secs_f64());
        self.metrics.queued(&labels, 1.0, request.bytes);
        self.wake.notify_one();
        let mut guard =
            Withdraw { controller: self, priority: request.priority, flow: &request.fairness_id, id: Some(id), start };
        let outcome = match deadline {
            None => (&mut released).await.map_or(Outcome::EvictedOther, |()| Outcome::Dispatched),
            Some(deadline) => tokio::select! {
                r = &mut released => r.map_or(Outcome::EvictedOther, |()| Outcome::Dispatched),
                () = tokio::time::sleep_until(deadline) => match guard.withdraw() {
                    Some(_) => Outcome::EvictedTtl(deadline - start),
                    // Taken by the dispatcher at this moment: its release is on the way.
                    None => (&mut released).await.map_or(Outcome::EvictedOther, |()| Outcome::Dispatched),
                },
            },
        };
        guard.id = None;
        self.metrics.finished(&labels, outcome.name(), start.elapsed().as_secs_f64());
        outcome
    }

    /// With `noEndpointRequestTTL`, waits until the pool has an endpoint or the TTL (from
    /// `start`) passes; false when it is still empty.
    async fn wait_for_endpoints(&self, start: Instant) -> bool {
        let Some(ttl) = self.settings.no_endpoint_ttl else { return false };
        let mut changes = self.store.subscribe();
        let deadline = start + ttl;
        // Bounded by the deadline: every round ends on a store change or at the deadline.
        while self.store.snapshot().is_empty() {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return false },
                () = tokio::time::sleep_until(deadline) => return !self.store.snapshot().is_empty(),
            }
        }
        true
    }

    /// One dispatch cycle: releases requests while the pool is below the ceiling; returns
    /// how many left.
    pub fn dispatch_cycle(&self) -> usize {
        let start = Instant::now();
        let mut saturation = self.saturation();
        let mut released = 0;
        // Bounded: each round takes one entry out of a finite queue.
        loop {
            let mut queues = self.queues();
            if queues.is_empty() || saturation >= self.settings.ceiling {
                break;
            }
            let Some(entry) = queues.pop_next() else { break };
            self.publish(&queues);
            drop(queues);
            self.metrics.queued(&entry.payload.labels, -1.0, entry.bytes);
            // A receiver gone means the caller withdrew at this moment; nothing to do.
            let _ = entry.payload.release.send(());
            released += 1;
            saturation = self.saturation();
        }
        self.metrics.cycle(start.elapsed().as_secs_f64(), saturation);
        released
    }

    /// The dispatch loop: a cycle on every arrival and every millisecond while requests
    /// wait, until `cancel`.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        loop {
            self.dispatch_cycle();
            let idle = self.queues().is_empty();
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(TICK), if !idle => {}
            }
        }
    }
}

/// Takes a waiting request out of the queue when its caller stops waiting (TTL or drop).
struct Withdraw<'a> {
    controller: &'a FlowController,
    priority: i32,
    flow: &'a str,
    /// `None` once the request left the queue.
    id: Option<EntryId>,
    start: Instant,
}

impl Withdraw<'_> {
    /// The request's labels when it was still queued (and is now removed).
    fn withdraw(&mut self) -> Option<FlowLabels> {
        let id = self.id.take()?;
        let mut queues = self.controller.queues();
        let entry = queues.remove(self.priority, self.flow, id)?;
        self.controller.publish(&queues);
        drop(queues);
        self.controller.metrics.queued(&entry.payload.labels, -1.0, entry.bytes);
        Some(entry.payload.labels)
    }
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if let Some(labels) = self.withdraw() {
            let seconds = self.start.elapsed().as_secs_f64();
            self.controller.metrics.finished(&labels, Outcome::EvictedCancelled.name(), seconds);
        }
    }
}
