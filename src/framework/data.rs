//! Per-request data, computed once before any profile runs: the prompt's token ids and
//! multimodal items, and per producer instance (`ByProducer`) the prefix-cache match of every
//! candidate, in-flight loads, latency predictions and encoder-cache matches. Typed fields,
//! not an untyped map: a new kind of data is a new field.

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

/// Prefix matches by endpoint. foldhash, not SipHash: the prefix scorer looks every candidate
/// up once per request (a quarter of a decision's instructions at 1,000 endpoints with SipHash),
/// and the keys are endpoint ids of the pool, not values a client chooses.
pub type EndpointMatches = HashMap<EndpointId, MatchInfo, foldhash::fast::RandomState>;

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
    pub per_endpoint: EndpointMatches,
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

/// Values of one data kind, one per producer instance, plus the instance that answers for
/// consumers that name none. The one shape of every per-producer field of [`RequestData`].
#[derive(Clone, Debug)]
pub struct ByProducer<T> {
    entries: Vec<(PluginName, T)>,
    default: Option<PluginName>,
}

impl<T> Default for ByProducer<T> {
    fn default() -> Self {
        Self { entries: Vec::new(), default: None }
    }
}

impl<T> ByProducer<T> {
    /// Empty, answering unnamed lookups with `default`.
    pub fn with_default(default: Option<PluginName>) -> Self {
        Self { entries: Vec::new(), default }
    }

    /// One value from `producer`, which is also the default.
    pub fn only(producer: impl Into<PluginName>, value: T) -> Self {
        let producer = producer.into();
        Self { entries: vec![(producer.clone(), value)], default: Some(producer) }
    }

    /// Records `producer`'s value (a producer writes once per request; a second write
    /// replaces the first).
    pub fn insert(&mut self, producer: PluginName, value: T) {
        match self.entries.iter_mut().find(|(n, _)| *n == producer) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((producer, value)),
        }
    }

    /// The value from `producer` (`None` = the default producer).
    pub fn get(&self, producer: Option<&str>) -> Option<&T> {
        let name = producer.or(self.default.as_deref())?;
        self.entries.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }

    /// The value from `producer` (`None` = the default producer), mutable.
    pub fn get_mut(&mut self, producer: Option<&str>) -> Option<&mut T> {
        let name = producer.or(self.default.as_deref())?;
        self.entries.iter_mut().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }

    /// The instance that answers unnamed lookups.
    pub fn default_producer(&self) -> Option<&PluginName> {
        self.default.as_ref()
    }

    /// True when no producer wrote a value.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every (producer, value), in write order.
    pub fn iter(&self) -> impl Iterator<Item = (&PluginName, &T)> {
        self.entries.iter().map(|(n, v)| (n, v))
    }
}

/// Which producer instance answers, per data kind, for consumers that name none; chosen by
/// the config loader's producer planning and copied into every request's [`RequestData`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefaultProducers {
    /// Prefix-match producer.
    pub prefix: Option<PluginName>,
    /// In-flight load producer.
    pub inflight: Option<PluginName>,
    /// Latency producer.
    pub latency: Option<PluginName>,
    /// Encoder-cache producer.
    pub encoder_cache: Option<PluginName>,
}

/// Everything computed for one request before its decision, in two phases. Phase 1
/// (`scheduling::stage`, asynchronous, before the scheduler runs): `tokens` and `mm_items`
/// from the tokenize step, `prefetched_prefix` and `predicted`. Phase 2 (the data producers, inside
/// `Scheduler::schedule_with`): everything else, and `tokens` when no tokenize step ran.
#[derive(Clone, Debug, Default)]
pub struct RequestData {
    /// Phase 1: raw latency predictions by `predicted-latency-producer` instance (absent when
    /// the predictor did not answer); the producer turns them into `LatencyPredictionInfo`.
    pub predicted: ByProducer<Arc<crate::latency::Predicted>>,
    /// Phase 1: multimodal items as the tokenize step's backend reported them (vLLM render
    /// `features`), with their encoder output sizes; `None` when no backend reported any.
    pub mm_items: Option<Arc<[crate::request::multimodal::MediaItem]>>,
    /// `TokenizedPrompt`: the tokenize step's ids (phase 1), or the estimate backend's
    /// (phase 2); `None` when neither ran, or tokenization missed its deadline.
    pub tokens: Option<Arc<[u32]>>,
    /// `PrefixCacheMatchInfo` by producer instance.
    pub prefix: ByProducer<Arc<PrefixMatches>>,
    /// Phase 1: prefix matches looked up before the decision by producers whose index is
    /// outside the process (every endpoint found, not yet narrowed to the candidates; no
    /// matches when the index did not answer in time).
    pub prefetched_prefix: ByProducer<Arc<PrefixMatches>>,
    /// `InFlightLoad` by producer instance.
    pub inflight: ByProducer<Arc<InFlightLoads>>,
    /// `LatencyPredictionInfo` by producer instance (absent when the predictor did not answer).
    pub latency: ByProducer<Arc<LatencyPredictions>>,
    /// `peer-endpoint`: the endpoint already chosen for the other side of a P/D pair, set by
    /// `disagg-profile-handler` before it returns the profile that needs it (decode-first: the
    /// decode pick, seen by the prefill profile; prefill-first: the prefill pick, seen by the
    /// decode profile). Set at most once per request; read with `peer_endpoint()`.
    pub peer_endpoint: OnceLock<Candidate>,
    /// `SessionID` (from `session-id-producer`; `None` = no session).
    pub session_id: Option<Arc<str>>,
    /// `EncoderCacheMatchInfo` by producer instance (absent for text-only requests).
    pub encoder_cache: ByProducer<Arc<EncoderCacheMatches>>,
}

impl RequestData {
    /// The `peer-endpoint` of the profile being run, when a profile handler recorded one.
    pub fn peer_endpoint(&self) -> Option<&Candidate> {
        self.peer_endpoint.get()
    }

    /// Points every per-producer kind at its default producer.
    pub fn set_defaults(&mut self, defaults: &DefaultProducers) {
        self.prefix.default.clone_from(&defaults.prefix);
        self.inflight.default.clone_from(&defaults.inflight);
        self.latency.default.clone_from(&defaults.latency);
        self.encoder_cache.default.clone_from(&defaults.encoder_cache);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_producer_answers_named_and_default_lookups() {
        let mut by = ByProducer::with_default(Some("b".into()));
        assert_eq!(by.get(None), None, "the default wrote nothing yet");
        by.insert("a".into(), 1);
        by.insert("b".into(), 2);
        assert_eq!((by.get(Some("a")), by.get(None), by.get(Some("c"))), (Some(&1), Some(&2), None));
        by.insert("a".into(), 3);
        assert_eq!(by.iter().map(|(n, v)| (n.to_string(), *v)).collect::<Vec<_>>(), [("a".into(), 3), ("b".into(), 2)]);
        let only = ByProducer::only("x", 7);
        assert_eq!((only.get(None), only.default_producer().map(|n| &**n)), (Some(&7), Some("x")));
    }
}
