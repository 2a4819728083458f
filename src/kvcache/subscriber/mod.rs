//! ZeroMQ subscriber: vLLM KV-event streams -> an [`IndexSink`] (the in-memory
//! `PrefixIndex` or the shared `RedisIndex`).
//!
//! Modes (reference §10), both may run at once:
//! * central: one SUB socket **bound** at `zmq_endpoint`; events attributed
//!   by topic `kv@<ip:port>@<model>` (or `kv@<ip>@<model>`) to the endpoint
//!   with that address;
//! * pod discovery (`discover_pods`): one SUB socket per endpoint
//!   **connecting** to `kv_events_endpoint` or `tcp://<ip>:<socket_port +
//!   rank>`, created and dropped as the endpoint list changes; events are
//!   attributed to that endpoint whatever the topic says.
//!
//! Data path: socket readers ([`socket`]) -> bounded per-worker queues
//! (drop and count when full) -> `concurrency` workers ([`worker`]) sharded by
//! endpoint name, which decode, check sequences, replay gaps over DEALER
//! ([`replay`]) and apply. [`SubscriberHandle::flush`] is a barrier for tests
//! and shutdown. Does not own the index or the endpoint list.
//!
//! Hostile peers: every socket enforces [`WireLimits`] (`maxFrameBytes`,
//! `maxMessageBytes`, `maxFramesPerMessage`) before anything is allocated for
//! a frame, drops only the offending connection and counts it
//! (`epp_kv_rejected_frames_total`); a handshake is bounded by
//! `handshakeTimeout`; the central socket holds at most `maxConnections`
//! connections and closes more on accept
//! (`epp_kv_connections_rejected_total`); every receive task runs under a
//! supervisor that restarts it after a panic or an error (`supervise`). The
//! limits live in the ZMTP decoder of the `zeromq` crate, so epp carries a
//! patched fork of zeromq 0.6.0 in `vendor/zeromq` (`[patch.crates-io]`;
//! `vendor/zeromq/README-EPP.md`): upstream, 0.7.0 included, reserves
//! whatever length a peer declares (one 9-byte header aborted the process),
//! buffers multipart messages without bound and parsed command frames with
//! panicking indexing. A fork with a small marked patch beats the
//! alternatives: no release fixes it, and the only other maintained ZMTP
//! implementation (`zmq`) binds the C libzmq.

mod frames;
mod limits;
mod replay;
mod socket;
mod supervise;
mod wire;
mod worker;

pub use frames::{FrameError, Frames, Topic, parse as parse_frames, topic as parse_topic};
pub use limits::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAMES, WireLimits,
};
pub use replay::{ReplayError, ReplayTimeouts, fetch as fetch_replay};
pub use wire::{DecodeSummary, decode_stream as decode_zmtp_stream};

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use self::socket::{Attribution, Intake};
use self::supervise::Backoff;
use self::worker::{Job, WorkerDeps};
use super::drift::DriftDetector;
use super::index::PrefixIndex;
use super::metrics::KvCacheMetrics;
use super::sink::IndexSink;
use arc_swap::ArcSwap;
use tokio::sync::{Mutex, Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Subscriber settings (llm-d `kvEventsConfig` + `podDiscoveryConfig`).
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    /// `zmqEndpoint`: bind one central SUB socket here (e.g. `tcp://*:5557`).
    pub zmq_endpoint: Option<String>,
    /// `topicFilter`, default `kv@`.
    pub topic_filter: String,
    /// `concurrency`: worker shards, default 4.
    pub concurrency: usize,
    /// `discoverPods`: one connecting SUB per endpoint, default true.
    pub discover_pods: bool,
    /// `socketPort`: publisher port of rank 0, default 5557.
    pub socket_port: u16,
    /// `replaySocketPort`: replay ROUTER port of rank 0; `None` disables replay.
    pub replay_socket_port: Option<u16>,
    /// Messages buffered per worker before dropping.
    pub queue_capacity: usize,
    /// First reconnect delay.
    pub reconnect_initial: Duration,
    /// Reconnect delay cap.
    pub reconnect_max: Duration,
    /// Replay timeouts.
    pub replay_timeouts: ReplayTimeouts,
    /// Frame, message and frame-count bounds of every KV-event socket (`maxFrameBytes`,
    /// `maxMessageBytes`, `maxFramesPerMessage`).
    pub limits: WireLimits,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        SubscriberConfig {
            zmq_endpoint: None,
            topic_filter: "kv@".to_owned(),
            concurrency: 4,
            discover_pods: true,
            socket_port: 5557,
            replay_socket_port: None,
            queue_capacity: 10_000,
            reconnect_initial: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            replay_timeouts: ReplayTimeouts::default(),
            limits: WireLimits::default(),
        }
    }
}

/// One endpoint as the subscriber sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEventSource {
    /// Endpoint name (index identity).
    pub name: Arc<str>,
    /// Pod IP.
    pub address: IpAddr,
    /// Serving port (matches topics `kv@ip:port@model`).
    pub port: u16,
    /// Data-parallel rank (offsets the publisher and replay ports).
    pub rank: u16,
    /// Explicit publisher endpoint, overriding `tcp://ip:socket_port+rank`.
    pub kv_events_endpoint: Option<String>,
}

/// Setup failures (runtime problems are counted and survived instead).
#[derive(Debug, thiserror::Error)]
pub enum SubscriberError {
    /// The central socket could not bind.
    #[error("cannot bind KV event socket at {endpoint}")]
    Bind {
        endpoint: String,
        #[source]
        source: zeromq::ZmqError,
    },
    /// The central socket could not subscribe.
    #[error("cannot subscribe to {filter:?}")]
    Subscribe {
        filter: String,
        #[source]
        source: zeromq::ZmqError,
    },
}

/// How often the running subscriber refreshes the index size gauges (`epp_kv_index_*`).
pub const GAUGE_REFRESH: Duration = Duration::from_secs(5);

/// Sets the index size gauges from `index`.
fn refresh_index_gauges(index: &PrefixIndex, m: &KvCacheMetrics) {
    m.index_entries.set(index.entries() as i64);
    m.index_bytes.set(index.approx_bytes() as i64);
    m.index_evictions.set(index.evictions() as i64);
    m.index_ambiguous_refs.set(index.ambiguous_refs() as i64);
}

/// Refreshes the index size gauges every [`GAUGE_REFRESH`] until `cancel`.
async fn refresh_gauges_periodically(index: Arc<PrefixIndex>, metrics: Arc<KvCacheMetrics>, cancel: CancellationToken) {
    let mut ticks = crate::periodic::Periodic::new(GAUGE_REFRESH);
    while ticks.tick(&cancel).await {
        refresh_index_gauges(&index, &metrics);
    }
}

/// Entry point; see [`Subscriber::spawn`].
#[derive(Debug)]
pub struct Subscriber;

/// Handle of a running subscriber.
#[derive(Debug)]
pub struct SubscriberHandle {
    intake: Arc<Intake>,
    index: IndexSink,
    central: Option<String>,
    cancel: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Subscriber {
    /// Binds the central socket (if configured), starts the workers and the
    /// endpoint-list manager. Tasks stop when `cancel` fires.
    pub async fn spawn(
        config: SubscriberConfig,
        index: impl Into<IndexSink>,
        metrics: Arc<KvCacheMetrics>,
        drift: Option<Arc<DriftDetector>>,
        sources: watch::Receiver<Vec<KvEventSource>>,
        cancel: CancellationToken,
    ) -> Result<SubscriberHandle, SubscriberError> {
        let index: IndexSink = index.into();
        let deps = WorkerDeps {
            index: index.clone(),
            metrics: metrics.clone(),
            drift,
            replay_timeouts: config.replay_timeouts,
            limits: config.limits,
        };
        let mut tasks = Vec::new();
        let mut jobs = Vec::new();
        for _ in 0..config.concurrency.max(1) {
            let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
            jobs.push(tx);
            let (deps, cancel) = (deps.clone(), cancel.clone());
            tasks.push(tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = worker::run(deps, rx) => {}
                }
            }));
        }
        let intake = Arc::new(Intake {
            jobs,
            metrics: metrics.clone(),
            received: AtomicU64::new(0),
            notify: Notify::new(),
            topic_filter: config.topic_filter.clone(),
            limits: config.limits,
            backoff: Backoff { initial: config.reconnect_initial, max: config.reconnect_max },
        });
        let attribution = Arc::new(ArcSwap::from_pointee(Attribution::new()));
        let mut central = None;
        if let Some(ep) = config.zmq_endpoint.as_deref().filter(|e| !e.is_empty()) {
            let bound =
                socket::bind_central(ep, &config.topic_filter, &config.limits, &metrics).await.inspect_err(|e| {
                    if matches!(e, SubscriberError::Bind { .. }) {
                        metrics.zmq_errors.with_label_values(&["bind"]).inc();
                    }
                })?;
            tracing::info!(endpoint = %bound.bound, "KV event central socket bound");
            central = Some(bound.bound.clone());
            let run = socket::run_central(bound, intake.clone(), attribution.clone(), cancel.clone());
            tasks.push(tokio::spawn(run));
        }
        tasks.push(tokio::spawn(socket::run_manager(config, sources, intake.clone(), attribution, cancel.clone())));
        if let Some(memory) = index.memory() {
            tasks.push(tokio::spawn(refresh_gauges_periodically(memory.clone(), metrics.clone(), cancel.clone())));
        }
        Ok(SubscriberHandle { intake, index, central, cancel, tasks: Mutex::new(tasks) })
    }
}

impl SubscriberHandle {
    /// The resolved central endpoint (e.g. `tcp://127.0.0.1:40123`), if bound.
    pub fn central_endpoint(&self) -> Option<&str> {
        self.central.as_deref()
    }

    /// Messages taken off the sockets so far (queued, dropped or malformed).
    pub fn received(&self) -> u64 {
        self.intake.received.load(Ordering::Acquire)
    }

    /// Waits until at least `n` messages were received. Unbounded: wrap in a timeout.
    pub async fn wait_received(&self, n: u64) {
        loop {
            let notified = self.intake.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.received() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Barrier: returns once every message received so far has been applied
    /// (or dropped), then refreshes the index gauges.
    pub async fn flush(&self) {
        let mut waits = Vec::new();
        for tx in &self.intake.jobs {
            let (done, wait) = oneshot::channel();
            if tx.send(Job::Flush(done)).await.is_ok() {
                waits.push(wait);
            }
        }
        for w in waits {
            let _ = w.await;
        }
        self.refresh_gauges();
    }

    /// Updates the index size gauges (in-memory index only).
    pub fn refresh_gauges(&self) {
        if let Some(index) = self.index.memory() {
            refresh_index_gauges(index, &self.intake.metrics);
        }
    }

    /// Cancels every task and waits for them.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().await);
        for t in tasks {
            let _ = t.await;
        }
    }
}
