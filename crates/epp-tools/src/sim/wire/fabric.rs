//! The wire-mode fabric: routing decisions are ext_proc calls to a real epp, load reaches epp
//! through its own scrapes of each pod's `/metrics`, KV events through real ZeroMQ PUB
//! sockets. Simulated time is paced by the wall clock: the event at simulated time `t` is
//! processed no earlier than `t / speed` wall seconds after the run started (it runs late
//! when the simulator cannot keep up).
//!
//! `--kv-loss` drops batches before they are sent (the sequence number still advances, so
//! epp's real subscriber sees the gap and purges the pod); delay and jitter are whatever the
//! real path adds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::client::{self, Client};
use super::pods::PodServer;
use crate::sim::channel::{Channel, ChannelConfig, ChannelStats, Delivery};
use crate::sim::engine::{Fabric, FleetConfig};
use crate::sim::inproc::pod_metrics;
use crate::sim::pod::Pod;
use crate::sim::router::{MODEL, RouteError};
use crate::sim::workload::SimRequest;
use epp::endpoints::vllm_metrics::vllm_exposition;
use epp::kvcache::events::EventBatch;

/// Routing, KV events and load of one wire-mode run.
pub struct WireFabric {
    rt: Handle,
    clients: Vec<Client>,
    next: usize,
    pods: Vec<PodServer>,
    by_addr: HashMap<String, usize>,
    /// Sequence numbers already used per pod (the subscription probes).
    seq_base: Vec<u64>,
    channel: Channel,
    wants_events: bool,
    fleet: FleetConfig,
    speed: f64,
    start: Instant,
    /// Reads epp's gap counter at the end of the run.
    gaps: Box<dyn Fn() -> u64 + Send>,
}

impl std::fmt::Debug for WireFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireFabric").field("pods", &self.pods).field("speed", &self.speed).finish()
    }
}

/// Everything a wire fabric is built from.
pub struct WireParts {
    /// Runtime the sockets and epp run on (the simulator thread blocks on it).
    pub rt: Handle,
    /// Connected ext_proc clients, one per epp replica; requests go round robin.
    pub clients: Vec<Client>,
    /// The pods' listeners, by pod index.
    pub pods: Vec<PodServer>,
    /// Sequence numbers already used per pod.
    pub seq_base: Vec<u64>,
    /// Whether the policy reads KV events.
    pub wants_events: bool,
    /// Simulated seconds per wall second.
    pub speed: f64,
    /// epp's `epp_kv_sequence_gaps_total` (summed over the replicas).
    pub gaps: Box<dyn Fn() -> u64 + Send>,
}

impl WireFabric {
    /// A fabric over running pods and epp; `seed` fixes the loss draws.
    pub fn new(parts: WireParts, fleet: &FleetConfig, seed: u64) -> Self {
        let by_addr = parts.pods.iter().enumerate().map(|(i, p)| (p.addr.to_string(), i)).collect();
        // Only loss is simulated; the real path adds its own delay.
        let faults = ChannelConfig { delay: 0.0, jitter: 0.0, loss: fleet.events.loss };
        Self {
            rt: parts.rt,
            clients: parts.clients,
            next: 0,
            by_addr,
            seq_base: parts.seq_base,
            channel: Channel::new(faults, parts.pods.len(), seed),
            pods: parts.pods,
            wants_events: parts.wants_events,
            fleet: fleet.clone(),
            speed: parts.speed.max(1e-3),
            start: Instant::now(),
            gaps: parts.gaps,
        }
    }

    /// The pods' listeners (for shutdown).
    pub fn into_pods(self) -> Vec<PodServer> {
        self.pods
    }
}

/// A completions body with the prompt as token ids.
fn body(req: &SimRequest) -> Vec<u8> {
    let v = serde_json::json!({"model": MODEL, "prompt": &req.prompt[..], "max_tokens": req.output_len});
    serde_json::to_vec(&v).unwrap_or_default()
}

impl Fabric for WireFabric {
    fn route(&mut self, req: &SimRequest, _pods: &[Pod]) -> Result<(usize, f64), RouteError> {
        let body = body(req);
        let replica = self.next % self.clients.len().max(1);
        self.next += 1;
        let Some(conn) = self.clients.get_mut(replica) else {
            return Err(RouteError::Wire { request: req.id, source: client::WireError::NoDestination });
        };
        let started = Instant::now();
        let dest = self
            .rt
            .block_on(client::route(conn, body))
            .map_err(|source| RouteError::Wire { request: req.id, source })?;
        let seconds = started.elapsed().as_secs_f64();
        let pod = self.by_addr.get(&dest).copied().ok_or(RouteError::UnknownEndpoint(dest))?;
        Ok((pod, seconds))
    }

    fn wants_events(&self) -> bool {
        self.wants_events
    }

    fn publish(&mut self, pod: usize, end: f64) -> Option<Delivery> {
        self.channel.publish(pod, end)
    }

    fn deliver(&mut self, pod: usize, seq: u64, batch: EventBatch) {
        let seq = self.seq_base[pod] + seq;
        let server = &mut self.pods[pod];
        if let Err(error) = self.rt.block_on(server.publish(seq, &batch)) {
            tracing::warn!(pod, %error, "simulated pod could not publish KV events");
        }
    }

    fn publish_load(&mut self, pods: &[Pod]) {
        for (server, pod) in self.pods.iter().zip(pods) {
            server.set_metrics(vllm_exposition(&pod_metrics(pod, &self.fleet)));
        }
    }

    fn advance_to(&mut self, at: f64) {
        let due = self.start + Duration::from_secs_f64(at.max(0.0) / self.speed);
        let now = Instant::now();
        if due > now {
            // Pacing the simulation to the wall clock is the point of wire mode.
            std::thread::sleep(due - now);
        }
    }

    fn channel_stats(&self) -> ChannelStats {
        ChannelStats { gaps: (self.gaps)(), ..self.channel.stats() }
    }
}
