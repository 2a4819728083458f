//! Training samples: the features a request was scheduled with, its observed TTFT (from the
//! decision to the first response chunk) and TPOT (`(end - first chunk) / (completion
//! tokens - 1)`, 0 with fewer than two tokens), posted in the background to the training
//! server (`POST {url}/add_training_data_bulk`, one entry per request). Bounded: at most
//! `MAX_PENDING` requests tracked and `MAX_UPLOADS` uploads in flight; anything beyond is
//! dropped and counted, never delays a request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Semaphore;

use super::client::JsonClient;
use super::metrics::LatencyMetrics;
use super::wire::{Features, TrainingBatch, TrainingEntry};

/// Requests tracked between the decision and the end of their response.
pub const MAX_PENDING: usize = 10_000;
/// Uploads in flight.
pub const MAX_UPLOADS: usize = 4;

#[derive(Debug)]
struct Pending {
    features: Features,
    scheduled_at: Instant,
    first_chunk: Option<Instant>,
}

/// Collects and uploads training samples.
#[derive(Debug)]
pub struct Trainer {
    client: JsonClient,
    url: String,
    timeout: Duration,
    metrics: LatencyMetrics,
    pending: Mutex<HashMap<String, Pending>>,
    uploads: Arc<Semaphore>,
}

impl Trainer {
    /// A trainer posting to `url`, each upload bounded by `timeout`.
    pub fn new(url: String, timeout: Duration, metrics: LatencyMetrics) -> Self {
        Self {
            client: JsonClient::new(timeout),
            url,
            timeout,
            metrics,
            pending: Mutex::new(HashMap::new()),
            uploads: Arc::new(Semaphore::new(MAX_UPLOADS)),
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics.training_samples.with_label_values(&[outcome]).inc();
    }

    /// The request was sent to an endpoint whose features were `features`.
    pub fn scheduled(&self, request_id: &str, features: Features) {
        let Ok(mut pending) = self.pending.lock() else { return };
        if pending.len() >= MAX_PENDING && !pending.contains_key(request_id) {
            drop(pending);
            self.count("dropped");
            return;
        }
        pending.insert(request_id.to_string(), Pending { features, scheduled_at: Instant::now(), first_chunk: None });
    }

    /// The first response chunk of the request arrived.
    pub fn first_chunk(&self, request_id: &str) {
        if let Some(p) = self.pending.lock().ok().as_mut().and_then(|m| m.get_mut(request_id)) {
            p.first_chunk.get_or_insert_with(Instant::now);
        }
    }

    /// The response ended; uploads a sample when a first chunk was seen.
    pub fn complete(&self, request_id: &str, completion_tokens: Option<u64>) {
        let Some(p) = self.pending.lock().ok().and_then(|mut m| m.remove(request_id)) else { return };
        let Some(first) = p.first_chunk else {
            self.count("dropped");
            return;
        };
        let ttft = first.saturating_duration_since(p.scheduled_at).as_secs_f64() * 1000.0;
        let generated = completion_tokens.unwrap_or(0);
        let tpot = if generated >= 2 { first.elapsed().as_secs_f64() * 1000.0 / (generated - 1) as f64 } else { 0.0 };
        let entry = TrainingEntry {
            features: Features { num_tokens_generated: generated, ..p.features },
            actual_ttft_ms: ttft,
            actual_tpot_ms: tpot,
            timestamp: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        };
        self.upload(entry);
    }

    fn upload(&self, entry: TrainingEntry) {
        let (Ok(handle), Ok(permit)) =
            (tokio::runtime::Handle::try_current(), self.uploads.clone().try_acquire_owned())
        else {
            self.count("dropped");
            return;
        };
        let Ok(body) = serde_json::to_vec(&TrainingBatch { entries: std::slice::from_ref(&entry) }) else {
            self.count("dropped");
            return;
        };
        let (client, url, timeout, metrics) =
            (self.client.clone(), self.url.clone(), self.timeout, self.metrics.clone());
        handle.spawn(async move {
            let sent = tokio::time::timeout(timeout, client.post(&url, "/add_training_data_bulk", body)).await;
            let outcome = if matches!(sent, Ok(Ok(_))) { "sent" } else { "failed" };
            metrics.training_samples.with_label_values(&[outcome]).inc();
            drop(permit);
        });
    }
}
