//! `prefix-cache-affinity-filter`: keeps only the endpoints that hold most of the prompt's
//! prefix ("sticky"), unless sticking would cost too much time to first token.
//!
//! With `ratio(e) = matchBlocks / totalBlocks`: at most one candidate -> all; with
//! probability `explorationProbability` -> all; sticky = `ratio >= affinityThreshold`; none
//! sticky -> all. When `maxTTFTPenaltyMs > 0` and some candidates are not sticky:
//! `ttft(e) = inFlightTokens(e) / peakPrefillThroughput x 1000` ms (source
//! `prefillThroughput`) or the predicted TTFT of `LatencyPredictionInfo` (source
//! `latencyPredictor`; no prediction -> +inf); if
//! `min(ttft(sticky)) - min(ttft(others)) > maxTTFTPenaltyMs` -> all, else the sticky ones.
//!
//! Parameters: `affinityThreshold` (0.80; <= 0 = no-op; > 1 rejected),
//! `explorationProbability` (0, in [0, 1]), `maxTTFTPenaltyMs` (18000; 0 = always stick),
//! `ttftSource` (`prefillThroughput` | `latencyPredictor`),
//! `peakPrefillThroughput` (15928 tokens/s; > 0 when the penalty is on with the
//! throughput source), `prefixMatchInfoProducerName`, `inFlightLoadProducerName`,
//! `latencyPredictionInfoProducerName` ("" = defaults).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, Filter, PluginInstance, PluginName};
use crate::plugins::scorer::producer_name;

/// Type name.
pub const TYPE: &str = "prefix-cache-affinity-filter";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Match ratio that makes an endpoint sticky.
    pub affinity_threshold: f64,
    /// Probability of skipping the filter.
    pub exploration_probability: f64,
    /// Largest TTFT cost of sticking, in ms.
    #[serde(rename = "maxTTFTPenaltyMs")]
    pub max_ttft_penalty_ms: f64,
    /// Where TTFT estimates come from.
    pub ttft_source: String,
    /// Prefill throughput in tokens/s.
    pub peak_prefill_throughput: f64,
    /// Prefix producer.
    pub prefix_match_info_producer_name: String,
    /// Latency producer.
    pub latency_prediction_info_producer_name: String,
    /// In-flight producer.
    pub in_flight_load_producer_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            affinity_threshold: 0.80,
            exploration_probability: 0.0,
            max_ttft_penalty_ms: 18_000.0,
            ttft_source: "prefillThroughput".into(),
            peak_prefill_throughput: 15_928.0,
            prefix_match_info_producer_name: String::new(),
            latency_prediction_info_producer_name: String::new(),
            in_flight_load_producer_name: String::new(),
        }
    }
}

/// Where TTFT estimates come from.
#[derive(Clone, Debug, PartialEq)]
enum TtftSource {
    /// In-flight tokens over the peak prefill throughput.
    PrefillThroughput,
    /// Predicted TTFT from a latency producer (None = the default one).
    LatencyPredictor(Option<PluginName>),
}

/// The filter.
#[derive(Debug)]
pub struct PrefixAffinityFilter {
    threshold: f64,
    exploration: f64,
    penalty_ms: f64,
    throughput: f64,
    prefix: Option<PluginName>,
    inflight: Option<PluginName>,
    source: TtftSource,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    if p.affinity_threshold > 1.0 || p.affinity_threshold.is_nan() {
        return Err(BuildError::new(at("affinityThreshold"), "must be <= 1"));
    }
    if !(0.0..=1.0).contains(&p.exploration_probability) {
        return Err(BuildError::new(at("explorationProbability"), "must be within [0, 1]"));
    }
    if p.max_ttft_penalty_ms.is_nan() || p.max_ttft_penalty_ms < 0.0 {
        return Err(BuildError::new(at("maxTTFTPenaltyMs"), "must be >= 0"));
    }
    let source = match p.ttft_source.as_str() {
        "prefillThroughput" => TtftSource::PrefillThroughput,
        "latencyPredictor" => TtftSource::LatencyPredictor(producer_name(p.latency_prediction_info_producer_name)),
        other => {
            return Err(BuildError::new(
                at("ttftSource"),
                format!("unknown source {other:?} (prefillThroughput or latencyPredictor)"),
            ));
        }
    };
    if source == TtftSource::PrefillThroughput
        && p.max_ttft_penalty_ms > 0.0
        && (p.peak_prefill_throughput.is_nan() || p.peak_prefill_throughput <= 0.0)
    {
        return Err(BuildError::new(at("peakPrefillThroughput"), "must be > 0 when maxTTFTPenaltyMs > 0"));
    }
    let f = Arc::new(PrefixAffinityFilter {
        threshold: p.affinity_threshold,
        exploration: p.exploration_probability,
        penalty_ms: p.max_ttft_penalty_ms,
        throughput: p.peak_prefill_throughput,
        prefix: producer_name(p.prefix_match_info_producer_name),
        inflight: producer_name(p.in_flight_load_producer_name),
        source,
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(f.clone()).with_consumer(f))
}

impl Consumer for PrefixAffinityFilter {
    fn consumes(&self) -> Vec<DataKey> {
        let mut keys = vec![DataKey::PrefixCacheMatchInfo(self.prefix.clone())];
        if self.penalty_ms > 0.0 {
            keys.push(match &self.source {
                TtftSource::PrefillThroughput => DataKey::InFlightLoad(self.inflight.clone()),
                TtftSource::LatencyPredictor(name) => DataKey::LatencyPredictionInfo(name.clone()),
            });
        }
        keys
    }
}

impl PrefixAffinityFilter {
    fn sticky_mask(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Option<Vec<bool>> {
        let m = cx.data.prefix.get(self.prefix.as_deref()).filter(|m| m.total_blocks > 0)?;
        let mask: Vec<bool> = candidates
            .iter()
            .map(|c| m.get(c.id()).match_blocks as f64 / m.total_blocks as f64 >= self.threshold)
            .collect();
        mask.contains(&true).then_some(mask)
    }

    /// True when sticking costs more than the allowed TTFT penalty.
    fn too_costly(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate], sticky: &[bool]) -> bool {
        if self.penalty_ms <= 0.0 || sticky.iter().all(|s| *s) {
            return false;
        }
        let loads = cx.data.inflight.get(self.inflight.as_deref());
        let predicted = match &self.source {
            TtftSource::LatencyPredictor(name) => Some(cx.data.latency.get(name.as_deref())),
            TtftSource::PrefillThroughput => None,
        };
        let ttft = |c: &Candidate| match predicted {
            Some(p) => p.and_then(|p| p.per_endpoint.get(c.id())).map_or(f64::INFINITY, |p| p.ttft_ms),
            None => {
                loads.and_then(|l| l.per_endpoint.get(c.id())).map_or(0, |(_, t)| *t) as f64 / self.throughput * 1000.0
            }
        };
        let min_of = |want: bool| {
            candidates
                .iter()
                .zip(sticky)
                .filter(|(_, s)| **s == want)
                .map(|(c, _)| ttft(c))
                .fold(f64::INFINITY, f64::min)
        };
        min_of(true) - min_of(false) > self.penalty_ms
    }
}

impl Filter for PrefixAffinityFilter {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        if self.threshold <= 0.0
            || candidates.len() <= 1
            || (self.exploration > 0.0 && rand::random::<f64>() < self.exploration)
        {
            return candidates;
        }
        let Some(sticky) = self.sticky_mask(cx, &candidates) else { return candidates };
        if self.too_costly(cx, &candidates, &sticky) {
            return candidates;
        }
        candidates.into_iter().zip(sticky).filter_map(|(c, s)| s.then_some(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{
        InFlightLoads, LatencyPrediction, LatencyPredictions, MatchInfo, PrefixMatches, RequestData,
    };
    use crate::test_util::{context_for, endpoint};

    fn data(inflight_tokens_a: u64) -> RequestData {
        let mut m = PrefixMatches { block_size_tokens: 16, total_blocks: 10, ..Default::default() };
        m.per_endpoint.insert("a".into(), MatchInfo { match_blocks: 9, weighted_blocks: 9.0 });
        m.per_endpoint.insert("b".into(), MatchInfo { match_blocks: 2, weighted_blocks: 2.0 });
        let mut l = InFlightLoads::default();
        l.per_endpoint.insert("a".into(), (3, inflight_tokens_a));
        RequestData {
            prefix: ByProducer::only("p", Arc::new(m)),
            inflight: ByProducer::only("i", Arc::new(l)),
            ..Default::default()
        }
    }

    fn filter(penalty_ms: f64) -> PrefixAffinityFilter {
        PrefixAffinityFilter {
            threshold: 0.8,
            exploration: 0.0,
            penalty_ms,
            throughput: 1000.0,
            prefix: None,
            inflight: None,
            source: TtftSource::PrefillThroughput,
        }
    }

    fn kept(f: &PrefixAffinityFilter, d: &RequestData) -> Vec<String> {
        let request = Default::default();
        let c = vec![endpoint("a").build(), endpoint("b").build(), endpoint("c").build()];
        f.filter(&context_for(&request, d), c).iter().map(|c| c.id().to_string()).collect()
    }

    #[test]
    fn sticks_to_the_cache_holder_unless_it_is_too_slow() {
        assert_eq!(kept(&filter(18_000.0), &data(0)), ["a"]);
        // a has 20000 tokens queued at 1000 tokens/s = 20 s > 18 s penalty: everyone stays.
        assert_eq!(kept(&filter(18_000.0), &data(20_000)), ["a", "b", "c"]);
        assert_eq!(kept(&filter(0.0), &data(20_000)), ["a"], "penalty 0 always sticks");
        let mut off = filter(0.0);
        off.threshold = 0.0;
        assert_eq!(kept(&off, &data(0)), ["a", "b", "c"]);
        let mut high = filter(0.0);
        high.threshold = 0.95;
        assert_eq!(kept(&high, &data(0)), ["a", "b", "c"], "nobody sticky -> all");
        super::super::contract::check(&filter(18_000.0));
    }

    #[test]
    fn latency_predictor_source_uses_predicted_ttft() {
        let mut d = data(0);
        let mut l = LatencyPredictions::default();
        let p = |ttft_ms| LatencyPrediction { ttft_ms, ..Default::default() };
        l.per_endpoint.insert("a".into(), p(25_000.0));
        l.per_endpoint.insert("b".into(), p(1_000.0));
        d.latency = ByProducer::only("lp", Arc::new(l));
        let mut f = filter(18_000.0);
        f.source = TtftSource::LatencyPredictor(None);
        // a (sticky) predicted 24 s slower than b: everyone stays.
        assert_eq!(kept(&f, &d), ["a", "b", "c"]);
        Arc::make_mut(d.latency.get_mut(None).expect("lp")).per_endpoint.insert("a".into(), p(5_000.0));
        assert_eq!(kept(&f, &d), ["a"]);
        // Only the sticky endpoint has a prediction: the others count as +inf, so it sticks.
        Arc::make_mut(d.latency.get_mut(None).expect("lp")).per_endpoint.remove("b");
        assert_eq!(kept(&f, &d), ["a"]);
        // No prediction for the sticky endpoint: +inf - 1000 > penalty -> all.
        let mut only_b = LatencyPredictions::default();
        only_b.per_endpoint.insert("b".into(), p(1_000.0));
        d.latency.insert("lp".into(), Arc::new(only_b));
        assert_eq!(kept(&f, &d), ["a", "b", "c"]);
    }

    #[test]
    fn parameter_ranges() {
        let spec =
            |v| PluginSpec { name: "f".into(), type_name: TYPE.into(), parameters: v, path: "plugins[7]".into() };
        let err = |v| build(&spec(v), &BuildContext::default()).unwrap_err().path;
        assert_eq!(err(serde_json::json!({"affinityThreshold": 1.5})), "plugins[7].parameters.affinityThreshold");
        assert_eq!(
            err(serde_json::json!({"explorationProbability": 2})),
            "plugins[7].parameters.explorationProbability"
        );
        assert_eq!(err(serde_json::json!({"peakPrefillThroughput": 0})), "plugins[7].parameters.peakPrefillThroughput");
        assert_eq!(err(serde_json::json!({"ttftSource": "oracle"})), "plugins[7].parameters.ttftSource");
        let predictor = serde_json::json!({"ttftSource": "latencyPredictor", "peakPrefillThroughput": 0});
        assert!(build(&spec(predictor), &BuildContext::default()).is_ok());
        assert!(
            build(
                &spec(serde_json::json!({"peakPrefillThroughput": 20000, "maxTTFTPenaltyMs": 5000})),
                &BuildContext::default()
            )
            .is_ok()
        );
    }
}
