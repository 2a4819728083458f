//! The publishing side: [`Outbox`] is the `ReplicaLink` plugins publish through (a bounded
//! queue; full = drop and count, so a decision never waits), and [`run`] drains it into the
//! stream. The first queued update starts a batch window (`--replica-sync-batch-window`);
//! at its end everything queued goes out as few entries (each up to [`ENTRY_BYTES`] or
//! `wire::MAX_BATCH` updates), pipelined `XADD ... MAXLEN ~ N` in one round trip. While
//! updates keep coming the task keeps this pace and never waits on the queue, so a decision
//! that publishes wakes no task. A pipeline whose write fails is dropped and counted;
//! nothing is retried (docs/replicas.md).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::applier::{Applier, now_ms};
use super::conn::{Backoff, Health, Role, connect};
use super::metrics::SyncMetrics;
use super::settings::SyncSettings;
use super::wire::{Body, EntryWriter, Message};
use crate::framework::plugin::PluginName;
use crate::framework::replica::{ReplicaLink, SharedState, SharedUpdate};

/// Most updates taken from the queue for one pipeline.
const DRAIN: usize = 4096;
/// An entry is closed once it holds this many bytes (a single larger update is an entry of
/// its own).
pub const ENTRY_BYTES: usize = 64 * 1024;

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

/// `messages` (all of one replica, in order) as entries of at most [`ENTRY_BYTES`] bytes.
pub fn entries(messages: &[Message]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut entry: Option<EntryWriter> = None;
    for message in messages {
        let writer = entry.get_or_insert_with(|| EntryWriter::new(&message.replica, message.published_ms));
        writer.push(message);
        if writer.bytes() >= ENTRY_BYTES || writer.is_full() {
            out.extend(entry.take().map(EntryWriter::finish));
        }
    }
    out.extend(entry.map(EntryWriter::finish));
    out
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
    let mut batch = Vec::with_capacity(DRAIN);
    loop {
        // Idle: wait for the first update (the one wake-up a decision may cause).
        if rx.is_empty() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                n = rx.recv_many(&mut batch, DRAIN) => if n == 0 { return },
            }
        }
        if !settings.batch_window.is_zero() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(settings.batch_window) => {}
            }
        }
        while batch.len() < DRAIN {
            match rx.try_recv() {
                Ok(message) => batch.push(message),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        if conn.is_none() {
            match connect(&client, Duration::from_secs(2)).await {
                Ok(c) => conn = Some(c),
                Err(error) => {
                    health.set(Role::Publisher, false, &error);
                    metrics.dropped_redis_error.inc_by(batch.len() as u64);
                    batch.clear();
                    if backoff.wait(&cancel).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut pipe = redis::pipe();
        for entry in entries(&batch) {
            pipe.cmd("XADD")
                .arg(&settings.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(settings.stream_len)
                .arg("*")
                .arg("m")
                .arg(entry)
                .ignore();
        }
        let sent = batch.len() as u64;
        batch.clear();
        match pipe.query_async::<()>(c).await {
            Ok(()) => {
                health.set_up(Role::Publisher);
                backoff = Backoff::default();
                metrics.sent.inc_by(sent);
            }
            Err(error) => {
                health.set(Role::Publisher, false, &error);
                metrics.dropped_redis_error.inc_by(sent);
                conn = None;
                if backoff.wait(&cancel).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::wire;

    #[test]
    fn entries_split_by_size_and_keep_every_message_in_order() {
        let keys: Arc<[u64]> = (0..1000u64).collect::<Vec<_>>().into();
        let messages: Vec<Message> = (0..20u64)
            .map(|i| Message {
                replica: "r".into(),
                published_ms: 1_000 + i,
                plugin: "approx".into(),
                body: Body::Update(SharedUpdate::PrefixRecorded {
                    endpoint: format!("pod-{i}").into(),
                    keys: keys.clone(),
                }),
            })
            .collect();
        let entries = entries(&messages);
        assert!(entries.len() > 1 && entries.iter().all(|e| e.len() < ENTRY_BYTES + 8_100), "{}", entries.len());
        let decoded: Vec<Message> = entries.iter().flat_map(|e| wire::decode(e).expect("decodes")).collect();
        assert_eq!(decoded, messages);
        assert!(super::entries(&[]).is_empty());
    }
}
