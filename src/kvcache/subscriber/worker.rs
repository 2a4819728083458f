//! Worker shards: decode, sequence checks, replay and apply, in order.
//!
//! Every message of an endpoint goes to the same worker (FNV-1a of the
//! endpoint name), so per-endpoint order is preserved while endpoints are
//! processed in parallel. For each stream (endpoint, DP rank) the worker
//! tracks the sequence: a gap is repaired by replay when a replay endpoint
//! is known, otherwise — or when the replay comes back incomplete — the
//! endpoint's entries are purged; a restart (seq going back) always purges.
//! Control jobs (endpoint removal, flush barriers) travel the same queue.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::frames::topic;
use super::limits::WireLimits;
use super::replay::{self, ReplayTimeouts};
use crate::kvcache::decode::{DecodeError, decode_batch};
use crate::kvcache::drift::DriftDetector;
use crate::kvcache::events::{EventBatch, KvEvent};
use crate::kvcache::metrics::KvCacheMetrics;
use crate::kvcache::sequence::{SeqTracker, SeqVerdict};
use crate::kvcache::sink::IndexSink;

/// One received message, attributed to an endpoint.
#[derive(Debug)]
pub struct Envelope {
    /// Endpoint name.
    pub endpoint: Arc<str>,
    /// Frame 0.
    pub topic: Bytes,
    /// Frame 1.
    pub seq: u64,
    /// Frame 2.
    pub payload: Bytes,
    /// Rank of the source (default stream id when the payload has none).
    pub rank: u32,
    /// Replay ROUTER to dial, when configured.
    pub replay: Option<Arc<str>>,
}

/// Work for a worker.
#[derive(Debug)]
pub enum Job {
    /// A live message.
    Message(Envelope),
    /// The endpoint left: purge it and forget its streams.
    RemoveEndpoint(Arc<str>),
    /// Barrier: answered once every earlier job is done.
    Flush(oneshot::Sender<()>),
}

/// Shared dependencies of the workers.
#[derive(Debug, Clone)]
pub struct WorkerDeps {
    pub index: IndexSink,
    pub metrics: Arc<KvCacheMetrics>,
    pub drift: Option<Arc<DriftDetector>>,
    pub replay_timeouts: ReplayTimeouts,
    /// Wire limits of the replay DEALER (a replay peer is as untrusted as a publisher).
    pub limits: WireLimits,
}

/// Worker index of an endpoint: FNV-1a 32 of the name.
pub fn shard_of(endpoint: &str, workers: usize) -> usize {
    let h = endpoint.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    h as usize % workers.max(1)
}

struct Worker {
    deps: WorkerDeps,
    streams: HashMap<(Arc<str>, u32), SeqTracker>,
}

/// Runs one worker until its queue closes.
pub async fn run(deps: WorkerDeps, mut rx: mpsc::Receiver<Job>) {
    let mut w = Worker { deps, streams: HashMap::new() };
    while let Some(job) = rx.recv().await {
        match job {
            Job::Message(env) => w.message(env).await,
            Job::RemoveEndpoint(name) => {
                w.streams.retain(|(e, _), _| *e != name);
                w.deps.index.remove_endpoint(&name).await;
                w.deps.metrics.clears.with_label_values(&["removed"]).inc();
                w.deps.metrics.forget_endpoint(&name);
                if let Some(d) = &w.deps.drift {
                    d.forget(&name);
                }
            }
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Worker {
    async fn clear(&mut self, endpoint: &Arc<str>, reason: &'static str) {
        let n = self.deps.index.clear_endpoint(endpoint).await;
        self.deps.metrics.clears.with_label_values(&[reason]).inc();
        tracing::info!(endpoint = %endpoint, reason, entries = n, "Purged endpoint from the prefix index");
    }

    async fn message(&mut self, env: Envelope) {
        let decoded = decode_batch(&env.payload);
        // The rank in the payload names the stream; fall back to the source's.
        let rank = decoded.as_ref().ok().and_then(|b| b.data_parallel_rank).unwrap_or(env.rank);
        let key = (env.endpoint.clone(), rank);
        let verdict = self.streams.entry(key).or_default().observe(env.seq);
        let m = self.deps.metrics.clone();
        let missing_from = match verdict {
            SeqVerdict::InOrder => None,
            SeqVerdict::Duplicate => return,
            SeqVerdict::First { missed } => (missed > 0 && env.replay.is_some()).then_some(0),
            SeqVerdict::Gap { from } => {
                m.gaps.inc();
                tracing::warn!(endpoint = %env.endpoint, from, to = env.seq, "KV event sequence gap");
                if env.replay.is_none() {
                    self.clear(&env.endpoint, "gap").await;
                }
                env.replay.is_some().then_some(from)
            }
            SeqVerdict::Restart => {
                m.restarts.inc();
                self.clear(&env.endpoint, "restart").await;
                (env.seq > 0 && env.replay.is_some()).then_some(0)
            }
        };
        if let (Some(from), Some(addr)) = (missing_from, env.replay.clone()) {
            self.replay(&env, &addr, from).await;
        }
        self.apply_decoded(&env.endpoint, &env.topic, decoded).await;
    }

    async fn replay(&mut self, env: &Envelope, addr: &str, from: u64) {
        let m = self.deps.metrics.clone();
        let batches = match replay::fetch(addr, from, env.seq, self.deps.replay_timeouts, &self.deps.limits).await {
            Ok(b) => b,
            Err(e) => {
                m.replays.with_label_values(&["failed"]).inc();
                m.zmq_errors.with_label_values(&["replay"]).inc();
                tracing::warn!(endpoint = %env.endpoint, error = %e, "KV event replay failed");
                self.clear(&env.endpoint, "gap").await;
                return;
            }
        };
        let mut expected = from;
        let mut complete = true;
        for (seq, payload) in batches {
            if seq < expected {
                continue;
            }
            if seq > expected && complete {
                complete = false;
                self.clear(&env.endpoint, "gap").await;
            }
            self.apply(&env.endpoint, &env.topic, &payload).await;
            expected = seq + 1;
        }
        if expected < env.seq && complete {
            complete = false;
            self.clear(&env.endpoint, "gap").await;
        }
        m.replays.with_label_values(&[if complete { "complete" } else { "incomplete" }]).inc();
    }

    async fn apply(&self, endpoint: &str, raw_topic: &[u8], payload: &[u8]) {
        self.apply_decoded(endpoint, raw_topic, decode_batch(payload)).await;
    }

    async fn apply_decoded(&self, endpoint: &str, raw_topic: &[u8], decoded: Result<EventBatch, DecodeError>) {
        let m = &self.deps.metrics;
        let batch = match decoded {
            Ok(b) => b,
            Err(e) => {
                m.decode_errors.inc();
                tracing::debug!(endpoint, error = %e, "Undecodable KV event batch");
                return;
            }
        };
        if batch.unknown_events > 0 {
            m.events.with_label_values(&["unknown", "skipped"]).inc_by(u64::from(batch.unknown_events));
        }
        // Report the block size the endpoint publishes (once per batch).
        let published = batch.events.iter().rev().find_map(|e| match e {
            KvEvent::BlockStored(s) if s.block_size > 0 => Some(s.block_size),
            _ => None,
        });
        if let Some(bs) = published {
            m.endpoint_block_size.with_label_values(&[endpoint]).set(i64::from(bs));
        }
        if let Some(d) = &self.deps.drift {
            for ev in &batch.events {
                if let KvEvent::BlockStored(s) = ev {
                    d.observe(endpoint, s, Some(m));
                }
            }
        }
        let t0 = std::time::Instant::now();
        let stats = self.deps.index.apply(endpoint, topic(raw_topic).model, &batch).await;
        m.apply_latency.observe(t0.elapsed().as_secs_f64());
        m.record_apply(&stats);
    }
}
