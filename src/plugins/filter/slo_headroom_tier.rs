//! `slo-headroom-tier-filter`: keeps one headroom tier of the latency predictions.
//!
//! Positive tier = `ttftHeadroom >= 0 and tpotHeadroom >= 0`; negative tier = the rest,
//! including candidates without a prediction. No predictions at all, or only one tier
//! present -> all candidates. Both present -> the negative tier with probability
//! `epsilonExploreNeg`, else the positive tier (so overloaded endpoints are re-evaluated now
//! and then).
//!
//! Parameters: `epsilonExploreNeg` (0.01, in [0, 1]), `latencyPredictionInfoProducerName`
//! ("" = the default `predicted-latency-producer`).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::LatencyPredictions;
use crate::framework::plugin::{Consumer, Filter, PluginInstance, PluginName};
use crate::plugins::scorer::producer_name;

/// Type name.
pub const TYPE: &str = "slo-headroom-tier-filter";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Probability of keeping the negative tier when both exist.
    pub epsilon_explore_neg: f64,
    /// Latency producer.
    pub latency_prediction_info_producer_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Self { epsilon_explore_neg: 0.01, latency_prediction_info_producer_name: String::new() }
    }
}

/// Per candidate: true when it is in the positive tier.
pub fn positive_tier(predictions: &LatencyPredictions, candidates: &[Candidate]) -> Vec<bool> {
    candidates.iter().map(|c| predictions.per_endpoint.get(c.id()).is_some_and(|p| p.meets_slo())).collect()
}

/// Which tier to keep when both exist: true = the positive one.
pub fn pick_positive(epsilon_explore_neg: f64) -> bool {
    !(epsilon_explore_neg > 0.0 && rand::random::<f64>() < epsilon_explore_neg)
}

/// The filter.
#[derive(Debug)]
pub struct SloHeadroomTierFilter {
    epsilon: f64,
    producer: Option<PluginName>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if !(0.0..=1.0).contains(&p.epsilon_explore_neg) {
        return Err(BuildError::new(format!("{}.parameters.epsilonExploreNeg", spec.path), "must be within [0, 1]"));
    }
    let f = Arc::new(SloHeadroomTierFilter {
        epsilon: p.epsilon_explore_neg,
        producer: producer_name(p.latency_prediction_info_producer_name),
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(f.clone()).with_consumer(f))
}

impl Consumer for SloHeadroomTierFilter {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::LatencyPredictionInfo(self.producer.clone())]
    }
}

impl Filter for SloHeadroomTierFilter {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let Some(predictions) = cx.data.latency.get(self.producer.as_deref()).filter(|p| !p.per_endpoint.is_empty())
        else {
            return candidates;
        };
        let tier = positive_tier(predictions, &candidates);
        if tier.iter().all(|t| *t) || !tier.contains(&true) {
            return candidates;
        }
        let keep = pick_positive(self.epsilon);
        candidates.into_iter().zip(tier).filter_map(|(c, t)| (t == keep).then_some(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{LatencyPrediction, RequestData};
    use crate::test_util::{context_for, endpoint};

    /// a meets both SLOs, b misses TTFT, c has no prediction.
    fn data() -> RequestData {
        let mut l = LatencyPredictions::default();
        let p = |ttft_headroom_ms, tpot_headroom_ms| LatencyPrediction {
            ttft_ms: 100.0,
            tpot_ms: 10.0,
            ttft_headroom_ms,
            tpot_headroom_ms,
        };
        l.per_endpoint.insert("a".into(), p(50.0, 0.0));
        l.per_endpoint.insert("b".into(), p(-5.0, 3.0));
        RequestData { latency: ByProducer::only("lp", Arc::new(l)), ..Default::default() }
    }

    fn kept(epsilon: f64, d: &RequestData, names: &[&str]) -> Vec<String> {
        let f = SloHeadroomTierFilter { epsilon, producer: None };
        let request = Default::default();
        let c = names.iter().map(|n| endpoint(n).build()).collect();
        f.filter(&context_for(&request, d), c).iter().map(|c| c.id().to_string()).collect()
    }

    #[test]
    fn keeps_one_tier() {
        assert_eq!(kept(0.0, &data(), &["a", "b", "c"]), ["a"], "positive tier");
        assert_eq!(kept(1.0, &data(), &["a", "b", "c"]), ["b", "c"], "exploration keeps the negative tier");
        assert_eq!(kept(0.0, &data(), &["b", "c"]), ["b", "c"], "one tier -> all");
        assert_eq!(kept(0.0, &RequestData::default(), &["a", "b"]), ["a", "b"], "no predictions -> all");
        super::super::contract::check(&SloHeadroomTierFilter { epsilon: 0.01, producer: None });
    }

    #[test]
    fn parameter_ranges() {
        let spec =
            |v| PluginSpec { name: "f".into(), type_name: TYPE.into(), parameters: v, path: "plugins[1]".into() };
        let err = build(&spec(serde_json::json!({"epsilonExploreNeg": 1.5})), &BuildContext::default()).unwrap_err();
        assert_eq!(err.path, "plugins[1].parameters.epsilonExploreNeg");
        assert!(build(&spec(serde_json::Value::Null), &BuildContext::default()).is_ok());
    }
}
