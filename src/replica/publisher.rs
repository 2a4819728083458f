//! The publishing side: [`Outbox`] is the `ReplicaLink` plugins publish through (a bounded
//! queue; full = drop and count, so a decision never waits), and [`run`] drains it into the
//! stream in pipelined `XADD ... MAXLEN ~ N` batches, reconnecting with backoff. A batch
//! whose write fails is dropped and counted; nothing is retried (docs/replicas.md).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::applier::{Applier, now_ms};
use super::conn::{Backoff, Health, Role, connect};
use super::metrics::SyncMetrics;
use super::settings::SyncSettings;
use super::wire::{self, Body, Message};
use crate::framework::plugin::PluginName;
use crate::framework::replica::{ReplicaLink, SharedState, SharedUpdate};

/// Most messages written in one pipeline.
const BATCH: usize = 256;

/// The queue plugins publish into.
#[derive(Debug)]
pub struct Outbox {
    replica: Arc<str>,
    tx: mpsc::Sender<Message>,
    applier: Arc<Applier>,
    metrics: SyncMetrics,
}

impl Outbox {
    /// An outbox of replica `replica` feeding `tx`; registrations go to `applier`.
    pub fn new(replica: Arc<str>, tx: mpsc::Sender<Message>, applier: Arc<Applier>, metrics: SyncMetrics) -> Self {
        Self { replica, tx, applier, metrics }
    }

    /// Queues a message of this replica (drops and counts when the queue is full).
    pub fn send(&self, plugin: PluginName, body: Body) {
        let message = Message { replica: self.replica.clone(), published_ms: now_ms(), plugin, body };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(message) {
            self.metrics.dropped_queue_full.inc();
        }
    }
}

impl ReplicaLink for Outbox {
    fn publish(&self, plugin: &PluginName, update: SharedUpdate) {
        self.send(plugin.clone(), Body::Update(update));
    }

    fn register(&self, plugin: PluginName, state: std::sync::Weak<dyn SharedState>) {
        self.applier.register(plugin, state);
    }
}

/// Drains `rx` into the stream until `cancel`.
pub async fn run(
    client: redis::Client,
    settings: Arc<SyncSettings>,
    mut rx: mpsc::Receiver<Message>,
    health: Arc<Health>,
    metrics: SyncMetrics,
    cancel: CancellationToken,
) {
    let mut conn = None;
    let mut backoff = Backoff::default();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        tokio::select! {
            _ = cancel.cancelled() => return,
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
        }
        if conn.is_none() {
            match connect(&client, Duration::from_secs(2)).await {
                Ok(c) => conn = Some(c),
                Err(error) => {
                    health.set(Role::Publisher, false, &error);
                    metrics.dropped_redis_error.inc_by(batch.len() as u64);
                    if backoff.wait(&cancel).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut pipe = redis::pipe();
        for message in &batch {
            pipe.cmd("XADD")
                .arg(&settings.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(settings.stream_len)
                .arg("*")
                .arg("m")
                .arg(wire::encode(message))
                .ignore();
        }
        match pipe.query_async::<()>(c).await {
            Ok(()) => {
                health.set_up(Role::Publisher);
                backoff = Backoff::default();
                metrics.sent.inc_by(batch.len() as u64);
            }
            Err(error) => {
                health.set(Role::Publisher, false, &error);
                metrics.dropped_redis_error.inc_by(batch.len() as u64);
                conn = None;
                if backoff.wait(&cancel).await.is_err() {
                    return;
                }
            }
        }
    }
}
