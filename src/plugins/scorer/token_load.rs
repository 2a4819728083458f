//! `token-load-scorer`: prefers endpoints with fewer tokens in flight, counting what this
//! request would add: `load = InFlightLoad.Tokens + UncachedRequestTokens`; score
//! `1 - min(1, load / queueThresholdTokens)`; `load == 0` -> 1.0.
//!
//! Parameters: `queueThresholdTokens` (4194304 = 128 x 32K; <= 0 means the default),
//! `inFlightLoadProducerName` ("" = default in-flight producer).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, Scorer};

/// Type name.
pub const TYPE: &str = "token-load-scorer";
const DEFAULT_THRESHOLD: i64 = 4_194_304;

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Token load that scores 0.
    pub queue_threshold_tokens: i64,
    /// In-flight producer to read.
    pub in_flight_load_producer_name: String,
}

/// The scorer.
#[derive(Debug)]
pub struct TokenLoadScorer {
    threshold: f64,
    producer: Option<PluginName>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let threshold = if p.queue_threshold_tokens > 0 { p.queue_threshold_tokens } else { DEFAULT_THRESHOLD } as f64;
    let s = Arc::new(TokenLoadScorer { threshold, producer: super::producer_name(p.in_flight_load_producer_name) });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_consumer(s))
}

impl Consumer for TokenLoadScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::InFlightLoad(self.producer.clone())]
    }
}

impl Scorer for TokenLoadScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let loads = cx.data.inflight.get(self.producer.as_deref());
        candidates
            .iter()
            .map(|c| {
                let in_flight = loads.and_then(|l| l.per_endpoint.get(c.id())).map_or(0, |(_, t)| *t);
                let added = loads.and_then(|l| l.uncached_tokens.get(c.id())).copied().unwrap_or(0);
                let load = (in_flight + added) as f64;
                if load <= 0.0 { 1.0 } else { 1.0 - (load / self.threshold).min(1.0) }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{InFlightLoads, RequestData};
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn in_flight_plus_uncached_against_threshold() {
        let mut l = InFlightLoads::default();
        l.per_endpoint.insert("a".into(), (2, 600));
        l.uncached_tokens.insert("a".into(), 200);
        l.uncached_tokens.insert("b".into(), 250);
        l.per_endpoint.insert("c".into(), (9, 5000));
        let data = RequestData { inflight: ByProducer::only("i", Arc::new(l)), ..Default::default() };
        let request = Default::default();
        let s = TokenLoadScorer { threshold: 1000.0, producer: None };
        let c = [endpoint("a").build(), endpoint("b").build(), endpoint("c").build(), endpoint("z").build()];
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.19999999999999996, 0.75, 0.0, 1.0]);
        super::super::contract::check(&s, &data);
    }
}
