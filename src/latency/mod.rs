//! The latency-predictor sidecars (GIE/llm-d `latencypredictor`): prediction servers answer
//! per-endpoint TTFT/TPOT predictions, a training server learns from observed latencies.
//!
//! `Predictor::predict` runs in the ext_proc stream before the (synchronous) decision, like
//! the tokenize step: one bulk call (`POST {url}/predict/bulk/strict`, chunks of at most
//! `maxBulkSize` entries) for every candidate, to one prediction server chosen round-robin,
//! bounded by a deadline. A dead, slow or confused predictor yields no predictions for that
//! request (counted in `epp_latency_prediction_errors_total{reason}`), never a failed
//! request. Because it runs before the data producers, the `prefix_cache_score` feature is 0;
//! the encoder-cache sizes (`useEncoderCacheFeatures`) are computed for the call by the bound
//! `mm-embeddings-cache-producer` (`DataProducer::encoder_cache_sizes`).
//! `Trainer` posts observed samples to `POST {url}/add_training_data_bulk` in the background.

pub mod client;
pub mod features;
pub mod metrics;
pub mod trainer;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use self::client::{Error, JsonClient};
use self::features::EncoderSizes;
use self::metrics::LatencyMetrics;
use self::wire::{BulkRequest, BulkResponse, Features, Prediction};
use crate::endpoints::model::{Candidate, EndpointId};
use crate::request::InferenceRequest;

/// Raw predictions of one request: per endpoint, the answer and the features asked.
#[derive(Clone, Debug, Default)]
pub struct Predicted {
    /// Per endpoint.
    pub per_endpoint: HashMap<EndpointId, (Prediction, Features)>,
}

/// Encoder-cache sizes of the candidates for one request (`useEncoderCacheFeatures`):
/// `input` is the request's total item weight; candidates absent from `per_endpoint` hold
/// none of the items.
#[derive(Clone, Debug, Default)]
pub struct EncoderCacheSizes {
    /// Total weight of the request's multimodal items (0 for text-only requests).
    pub input: u64,
    /// Per endpoint holding some of them.
    pub per_endpoint: HashMap<EndpointId, EncoderSizes>,
}

impl EncoderCacheSizes {
    fn get(&self, id: &str) -> Option<&EncoderSizes> {
        self.per_endpoint.get(id)
    }
}

/// Client of the prediction servers.
#[derive(Debug)]
pub struct Predictor {
    client: JsonClient,
    urls: Vec<String>,
    next: AtomicUsize,
    timeout: Duration,
    max_bulk: usize,
    metrics: LatencyMetrics,
}

impl Predictor {
    /// A predictor over `urls` (at least one), each call bounded by `timeout`.
    pub fn new(urls: Vec<String>, timeout: Duration, max_bulk: usize, metrics: LatencyMetrics) -> Self {
        Self {
            client: JsonClient::new(timeout),
            urls,
            next: AtomicUsize::new(0),
            timeout,
            max_bulk: max_bulk.max(1),
            metrics,
        }
    }

    /// The metric families.
    pub fn metrics(&self) -> &LatencyMetrics {
        &self.metrics
    }

    /// Predictions for every candidate, or `None` (counted) when the servers did not answer
    /// in time or answered nonsense. `tokens`: the tokenize step's ids, when it ran (else
    /// the prompt length is estimated from the body size). `encoder`: the candidates' encoder-cache sizes when the
    /// producer uses encoder features (sent as `encoder_input_size` / `encoder_matched_size`).
    pub async fn predict(
        &self,
        request: &InferenceRequest,
        tokens: Option<&[u32]>,
        candidates: &[Candidate],
        encoder: Option<&EncoderCacheSizes>,
    ) -> Option<Arc<Predicted>> {
        if candidates.is_empty() || self.urls.is_empty() {
            return None;
        }
        let tokens = features::input_tokens(request, tokens);
        let asked: Vec<Features> = candidates
            .iter()
            .map(|c| {
                let sizes =
                    encoder.map(|e| e.get(c.id()).copied().unwrap_or(EncoderSizes { input: e.input, matched: 0 }));
                features::features(tokens, c, sizes)
            })
            .collect();
        let url = &self.urls[self.next.fetch_add(1, Ordering::Relaxed) % self.urls.len()];
        let start = Instant::now();
        let answer = match tokio::time::timeout(self.timeout, self.call_all(url, &asked)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout),
        };
        let labels = [request.incoming_model.as_str(), request.target_model.as_str()];
        let elapsed = start.elapsed().as_secs_f64();
        self.metrics.ttft_prediction_duration.with(&labels).observe(elapsed);
        self.metrics.tpot_prediction_duration.with(&labels).observe(elapsed);
        match answer {
            Ok(predictions) => {
                let per_endpoint = candidates
                    .iter()
                    .zip(predictions)
                    .zip(asked)
                    .filter_map(|((c, p), f)| p.filter(valid).map(|p| (c.id().clone(), (p, f))))
                    .collect();
                Some(Arc::new(Predicted { per_endpoint }))
            }
            Err(e) => {
                tracing::debug!(url, error = %e, "Latency prediction failed; scheduling without predictions");
                self.metrics.prediction_errors.with_label_values(&[e.reason()]).inc();
                None
            }
        }
    }

    /// Predictions aligned with `asked`, in chunks of `max_bulk`.
    async fn call_all(&self, url: &str, asked: &[Features]) -> Result<Vec<Option<Prediction>>, Error> {
        let mut out = Vec::with_capacity(asked.len());
        for chunk in asked.chunks(self.max_bulk) {
            let body =
                serde_json::to_vec(&BulkRequest { requests: chunk }).map_err(|e| Error::Decode(e.to_string()))?;
            let bytes = self.client.post(url, "/predict/bulk/strict", body).await?;
            let answer: BulkResponse = serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))?;
            if answer.predictions.len() != chunk.len() {
                return Err(Error::Decode(format!(
                    "{} predictions for {} requests",
                    answer.predictions.len(),
                    chunk.len()
                )));
            }
            out.extend(answer.predictions);
        }
        Ok(out)
    }
}

/// A usable prediction: finite and non-negative.
fn valid(p: &Prediction) -> bool {
    p.ttft_ms.is_finite() && p.tpot_ms.is_finite() && p.ttft_ms >= 0.0 && p.tpot_ms >= 0.0
}
