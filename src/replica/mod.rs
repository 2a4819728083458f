//! Active-active replicas: state sharing through a Redis (or Valkey) stream
//! (docs/replicas.md). Plugins publish what they learn through the
//! `framework::replica::ReplicaHandle` this module provides and register a `SharedState`
//! that applies what the other replicas published; this module never names a plugin.
//!
//! - `settings`: flags and validated settings (URL schemes, key, trim, heartbeat).
//! - `wire`: the versioned binary entry format, a batch of one replica's updates per stream
//!   entry (the only module that knows the bytes).
//! - `publisher`: the bounded outbox (never blocks a decision) and the `XADD` writer, one
//!   pipeline per batch window.
//! - `reader`: catch-up from the retained window, then `XREAD BLOCK`; resumes from its
//!   position after an outage and counts gaps.
//! - `applier`: routes each entry's updates to plugins (a run per call), skips own entries
//!   from their header and stale updates, tracks live peers.
//! - `conn`: connections with timeouts, backoff, connection health and outage counting.
//! - `metrics`: `epp_replica_sync_*`.
//!
//! `ReplicaSync::new` makes the handle before plugins are built; `ReplicaSync::spawn` starts
//! the publisher, the reader and the heartbeat, all stopped by the app's cancellation token.

pub mod applier;
pub mod conn;
pub mod metrics;
pub mod publisher;
pub mod reader;
pub mod settings;
pub mod wire;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::framework::replica::ReplicaHandle;
use applier::Applier;
use conn::Health;
use metrics::SyncMetrics;
use publisher::Outbox;
pub use settings::{ReplicaArgs, SettingsError, SyncSettings};
use wire::{Body, Message};

/// Why sync could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Invalid settings.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// Metric registration failed.
    #[error("replica sync metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Replica sync, built before the plugins and started with the app.
#[derive(Debug)]
pub struct ReplicaSync {
    settings: Arc<SyncSettings>,
    client: redis::Client,
    replica: Arc<str>,
    applier: Arc<Applier>,
    outbox: Arc<Outbox>,
    queue: Mutex<Option<mpsc::Receiver<Message>>>,
    metrics: SyncMetrics,
}

impl ReplicaSync {
    /// Checks `settings`, registers the metrics and makes the outbox (nothing connects yet).
    pub fn new(settings: SyncSettings, registry: &prometheus::Registry) -> Result<Self, SyncError> {
        let client = settings.client()?;
        let metrics = SyncMetrics::register(registry)?;
        let replica: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let applier = Arc::new(Applier::new(replica.clone(), settings.heartbeat, metrics.clone()));
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let outbox = Arc::new(Outbox::new(replica.clone(), tx, applier.clone(), metrics.clone()));
        Ok(Self {
            settings: Arc::new(settings),
            client,
            replica,
            applier,
            outbox,
            queue: Mutex::new(Some(rx)),
            metrics,
        })
    }

    /// The handle plugins publish through.
    pub fn handle(&self) -> ReplicaHandle {
        ReplicaHandle::new(self.outbox.clone())
    }

    /// This replica's id (random per process).
    pub fn replica_id(&self) -> &str {
        &self.replica
    }

    /// Barrier: remote messages applied so far by kind, changing on each.
    pub fn applied(&self) -> watch::Receiver<applier::AppliedCounts> {
        self.applier.applied()
    }

    /// Starts the publisher, the reader and the heartbeat on `tasks` (once; later calls do
    /// nothing). The reader's first catch-up waits for `endpoints_synced` (the endpoint
    /// source's first sync): updates for endpoints this replica does not know yet are skipped.
    pub fn spawn(&self, tasks: &mut JoinSet<()>, cancel: &CancellationToken, endpoints_synced: watch::Receiver<bool>) {
        let Some(rx) = self.queue.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        tracing::info!(url = %self.settings.redacted(), key = %self.settings.key, replica = %self.replica, "Replica sync on");
        let health = Arc::new(Health::new(self.metrics.clone()));
        tasks.spawn(publisher::run(
            self.client.clone(),
            self.settings.clone(),
            rx,
            health.clone(),
            self.metrics.clone(),
            cancel.clone(),
        ));
        tasks.spawn(reader::run(
            self.client.clone(),
            self.settings.clone(),
            self.applier.clone(),
            health,
            self.metrics.clone(),
            endpoints_synced,
            cancel.clone(),
        ));
        tasks.spawn(heartbeat(self.outbox.clone(), self.applier.clone(), self.settings.heartbeat, cancel.clone()));
    }
}

/// Every period: a heartbeat, the plugins' absolute state (in-flight totals), and peer
/// expiry.
async fn heartbeat(outbox: Arc<Outbox>, applier: Arc<Applier>, period: std::time::Duration, cancel: CancellationToken) {
    let mut ticks = crate::periodic::Periodic::new(period);
    while ticks.tick(&cancel).await {
        outbox.send(Arc::from(""), Body::Heartbeat);
        for (plugin, state) in applier.states() {
            for update in state.heartbeat() {
                outbox.send(plugin.clone(), Body::Update(update));
            }
        }
        applier.expire_peers();
    }
}
