//! JSON shapes of the latency-predictor sidecars (GIE `latencypredictor`): the prediction
//! server's `POST /predict/bulk/strict` (`{"requests": [features…]}` ->
//! `{"predictions": [{"ttft_ms", "tpot_ms", …}…]}`) and the training server's
//! `POST /add_training_data_bulk` (`{"entries": [features + actual_ttft_ms,
//! actual_tpot_ms, timestamp]}`). Unknown response fields are ignored.

use serde::{Deserialize, Serialize};

/// Features of one (request, endpoint) pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Features {
    /// KV-cache utilisation of the endpoint, fraction in [0, 1].
    pub kv_cache_percentage: f64,
    /// Prompt length in tokens.
    pub input_token_length: u64,
    /// Requests waiting on the endpoint.
    pub num_request_waiting: u64,
    /// Requests running on the endpoint.
    pub num_request_running: u64,
    /// Tokens generated so far (0 when predicting before dispatch).
    pub num_tokens_generated: u64,
    /// Fraction of the prompt's prefix cached on the endpoint, in [0, 1].
    pub prefix_cache_score: f64,
    /// Total weight (encoder output size) of the request's multimodal items; sent only with
    /// `useEncoderCacheFeatures` (the sidecars zero-fill it when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder_input_size: Option<u64>,
    /// Weight of those items the endpoint likely holds in its encoder cache; sent only with
    /// `useEncoderCacheFeatures`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder_matched_size: Option<u64>,
}

/// Body of a bulk prediction call.
#[derive(Debug, Serialize)]
pub struct BulkRequest<'a> {
    /// One entry per endpoint.
    pub requests: &'a [Features],
}

/// One prediction (milliseconds).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct Prediction {
    /// Predicted time to first token.
    pub ttft_ms: f64,
    /// Predicted time per output token.
    pub tpot_ms: f64,
}

/// Answer of a bulk prediction call; a `null` entry is a failed prediction.
#[derive(Debug, Deserialize)]
pub struct BulkResponse {
    /// Aligned with the request's entries.
    pub predictions: Vec<Option<Prediction>>,
}

/// One training sample.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingEntry {
    /// Features captured when the request was scheduled (with `num_tokens_generated` set to
    /// the completion length).
    #[serde(flatten)]
    pub features: Features,
    /// Observed time to first token, ms.
    pub actual_ttft_ms: f64,
    /// Observed time per output token, ms (0 when fewer than two tokens were generated).
    pub actual_tpot_ms: f64,
    /// RFC 3339 time of the observation.
    pub timestamp: String,
}

/// Body of a training upload.
#[derive(Debug, Serialize)]
pub struct TrainingBatch<'a> {
    /// The samples.
    pub entries: &'a [TrainingEntry],
}
