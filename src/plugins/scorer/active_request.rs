//! `active-request-scorer`: prefers endpoints with fewer requests in flight from this EPP
//! (`InFlightLoad.Requests` from the in-flight producer). `count <= idleThreshold` -> 1.0;
//! otherwise `(maxCount - count) / maxCount x maxBusyScore`, `maxCount` = the largest count
//! among the candidates.
//!
//! Parameters: `idleThreshold` (0), `maxBusyScore` (1.0, in [0, 1]),
//! `inFlightLoadProducerName` ("" = default in-flight producer), `requestTimeout` (accepted
//! and ignored since llm-d #931).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, Scorer};

/// Type name.
pub const TYPE: &str = "active-request-scorer";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Counts at or below this score 1.0.
    pub idle_threshold: u64,
    /// Best score of a busy endpoint.
    pub max_busy_score: f64,
    /// In-flight producer to read.
    pub in_flight_load_producer_name: String,
    /// Ignored (was the TTL of the scorer's own request cache).
    pub request_timeout: Option<serde_json::Value>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            idle_threshold: 0,
            max_busy_score: 1.0,
            in_flight_load_producer_name: String::new(),
            request_timeout: None,
        }
    }
}

/// The scorer.
#[derive(Debug)]
pub struct ActiveRequestScorer {
    idle_threshold: u64,
    max_busy_score: f64,
    producer: Option<PluginName>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if !(0.0..=1.0).contains(&p.max_busy_score) {
        return Err(BuildError::new(format!("{}.parameters.maxBusyScore", spec.path), "must be within [0, 1]"));
    }
    if p.request_timeout.is_some() {
        tracing::warn!(plugin = %spec.name, "active-request-scorer: requestTimeout is ignored (load comes from inflight-load-producer)");
    }
    let s = Arc::new(ActiveRequestScorer {
        idle_threshold: p.idle_threshold,
        max_busy_score: p.max_busy_score,
        producer: super::producer_name(p.in_flight_load_producer_name),
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_consumer(s))
}

impl Consumer for ActiveRequestScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::InFlightLoad(self.producer.clone())]
    }
}

impl Scorer for ActiveRequestScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let loads = cx.data.inflight.get(self.producer.as_deref());
        let counts: Vec<u64> =
            candidates.iter().map(|c| loads.and_then(|l| l.per_endpoint.get(c.id())).map_or(0, |(r, _)| *r)).collect();
        let max = counts.iter().copied().max().unwrap_or(0);
        counts
            .iter()
            .map(|&n| {
                if n <= self.idle_threshold || max == 0 {
                    1.0
                } else {
                    (max - n) as f64 / max as f64 * self.max_busy_score
                }
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

    pub(crate) fn loads(v: &[(&str, u64, u64)]) -> RequestData {
        let mut l = InFlightLoads::default();
        for (id, r, t) in v {
            l.per_endpoint.insert((*id).into(), (*r, *t));
        }
        RequestData { inflight: ByProducer::only("i", Arc::new(l)), ..Default::default() }
    }

    #[test]
    fn fewer_in_flight_scores_higher() {
        let request = Default::default();
        let data = loads(&[("a", 4, 0), ("b", 1, 0)]);
        let s = ActiveRequestScorer { idle_threshold: 1, max_busy_score: 0.5, producer: None };
        let c = [endpoint("a").build(), endpoint("b").build(), endpoint("c").build()];
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.0, 1.0, 1.0]);
        let s = ActiveRequestScorer { idle_threshold: 0, max_busy_score: 1.0, producer: None };
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.0, 0.75, 1.0]);
        super::super::contract::check(&s, &data);
    }
}
