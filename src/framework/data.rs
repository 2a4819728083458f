//! Per-request data computed once by data producers before any profile runs: the prompt's
//! token ids and, per prefix producer, the prefix-cache match of every candidate (and, per
//! latency producer, the predicted latencies). Typed
//! fields, not an untyped map: a new kind of data is a new field.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::plugin::PluginName;
use crate::endpoints::model::{Candidate, EndpointId};
// Defined next to the predictor that fills it; part of the per-request data vocabulary.
pub use crate::latency::features::LatencyPrediction;

/// How much of the request's prefix one endpoint holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MatchInfo {
    /// Consecutive leading blocks held.
    pub match_blocks: usize,
    /// Tier-weighted match (equals `match_blocks` when tiers are not known).
    pub weighted_blocks: f64,
}

/// `PrefixCacheMatchInfo` for all candidates, from one producer.
#[derive(Clone, Debug, Default)]
pub struct PrefixMatches {
    /// Block size in tokens used to cut the prompt.
    pub block_size_tokens: usize,
    /// Number of blocks of the request.
    pub total_blocks: usize,
    /// The request's block keys (used after the decision to record the prefix).
    pub keys: Arc<[u64]>,
    /// Per endpoint; endpoints holding nothing are absent.
    pub per_endpoint: HashMap<EndpointId, MatchInfo>,
}

impl PrefixMatches {
    /// The match of one endpoint (zero when absent).
    pub fn get(&self, id: &str) -> MatchInfo {
        self.per_endpoint.get(id).copied().unwrap_or_default()
    }
}

/// In-flight load of every candidate as a producer tracks it.
#[derive(Clone, Debug, Default)]
pub struct InFlightLoads {
    /// Tokens this request would add to an endpoint (prompt tokens not already cached there).
    pub uncached_tokens: HashMap<EndpointId, u64>,
    /// Requests and tokens in flight per endpoint.
    pub per_endpoint: HashMap<EndpointId, (u64, u64)>,
}

/// `LatencyPredictionInfo` for the candidates one producer obtained a prediction for;
/// endpoints without a prediction are absent.
#[derive(Clone, Debug, Default)]
pub struct LatencyPredictions {
    /// Per endpoint.
    pub per_endpoint: HashMap<EndpointId, LatencyPrediction>,
}

/// `EncoderCacheMatchInfo` for all candidates, from one producer: the request's unique
/// multimodal items and, per endpoint, the weight of those it likely holds in its encoder
/// cache.
#[derive(Clone, Debug, Default)]
pub struct EncoderCacheMatches {
    /// The request's unique items (first occurrence order), with their weights (`size`).
    pub items: Arc<[crate::request::multimodal::MediaItem]>,
    /// Sum of the items' weights (> 0 when there are items).
    pub total_weight: u64,
    /// Matched weight per endpoint; endpoints holding none of the items are absent.
    pub per_endpoint: HashMap<EndpointId, u64>,
}

impl EncoderCacheMatches {
    /// Matched weight of one endpoint (0 when absent).
    pub fn matched(&self, id: &str) -> u64 {
        self.per_endpoint.get(id).copied().unwrap_or(0)
    }
}

/// Everything producers computed for one request.
#[derive(Clone, Debug, Default)]
pub struct RequestData {
    /// Phase 1, filled by `scheduling::stage` before the decision: raw latency predictions by
    /// `predicted-latency-producer` instance (absent when the predictor did not answer); the
    /// producer turns them into `LatencyPredictionInfo`.
    pub predicted: Vec<(PluginName, Arc<crate::latency::Predicted>)>,
    /// `TokenizedPrompt`.
    pub tokens: Option<Arc<[u32]>>,
    /// `PrefixCacheMatchInfo` by producer instance.
    pub prefix: Vec<(PluginName, Arc<PrefixMatches>)>,
    /// Which prefix producer answers for consumers that name none.
    pub default_prefix_producer: Option<PluginName>,
    /// `InFlightLoad` by producer instance.
    pub inflight: Vec<(PluginName, Arc<InFlightLoads>)>,
    /// Which in-flight producer answers for consumers that name none.
    pub default_inflight_producer: Option<PluginName>,
    /// `LatencyPredictionInfo` by producer instance (absent when the predictor did not answer).
    pub latency: Vec<(PluginName, Arc<LatencyPredictions>)>,
    /// Which latency producer answers for consumers that name none.
    pub default_latency_producer: Option<PluginName>,
    /// `peer-endpoint`: the endpoint already chosen for the other side of a P/D pair, set by
    /// `disagg-profile-handler` before it returns the profile that needs it (decode-first: the
    /// decode pick, seen by the prefill profile; prefill-first: the prefill pick, seen by the
    /// decode profile). Set at most once per request; read with `peer_endpoint()`.
    pub peer_endpoint: OnceLock<Candidate>,
    /// `SessionID` (from `session-id-producer`; `None` = no session).
    pub session_id: Option<Arc<str>>,
    /// `EncoderCacheMatchInfo` by producer instance (absent for text-only requests).
    pub encoder_cache: Vec<(PluginName, Arc<EncoderCacheMatches>)>,
    /// Which encoder-cache producer answers for consumers that name none.
    pub default_encoder_cache_producer: Option<PluginName>,
}

impl RequestData {
    /// The `peer-endpoint` of the profile being run, when a profile handler recorded one.
    pub fn peer_endpoint(&self) -> Option<&Candidate> {
        self.peer_endpoint.get()
    }

    /// Prefix matches from `producer` (None = the default producer).
    pub fn prefix(&self, producer: Option<&str>) -> Option<&Arc<PrefixMatches>> {
        let name = producer.or(self.default_prefix_producer.as_deref())?;
        self.prefix.iter().find(|(n, _)| &**n == name).map(|(_, m)| m)
    }

    /// Latency predictions from `producer` (None = the default producer).
    pub fn latency(&self, producer: Option<&str>) -> Option<&Arc<LatencyPredictions>> {
        let name = producer.or(self.default_latency_producer.as_deref())?;
        self.latency.iter().find(|(n, _)| &**n == name).map(|(_, m)| m)
    }

    /// Encoder-cache matches from `producer` (None = the default producer).
    pub fn encoder_cache(&self, producer: Option<&str>) -> Option<&Arc<EncoderCacheMatches>> {
        let name = producer.or(self.default_encoder_cache_producer.as_deref())?;
        self.encoder_cache.iter().find(|(n, _)| &**n == name).map(|(_, m)| m)
    }

    /// In-flight loads from `producer` (None = the default producer).
    pub fn inflight(&self, producer: Option<&str>) -> Option<&Arc<InFlightLoads>> {
        let name = producer.or(self.default_inflight_producer.as_deref())?;
        self.inflight.iter().find(|(n, _)| &**n == name).map(|(_, m)| m)
    }
}
