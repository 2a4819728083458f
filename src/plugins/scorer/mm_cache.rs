//! `mm-embeddings-cache-scorer`: prefers endpoints that likely hold the request's multimodal
//! items in their encoder cache. Reads `EncoderCacheMatchInfo` (`producerName`, default: the
//! `mm-embeddings-cache-producer`, created automatically when none is declared).
//! Score = matched item weight / total item weight of the request (weights are encoder
//! output sizes when vLLM reported them, else 1 per item); 0 for text-only requests and
//! endpoints holding none of the items. Parameters: `producerName` ("").

use std::sync::Arc;

use serde::Deserialize;

use super::producer_name;
use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, Scorer};

/// Type name.
pub const TYPE: &str = "mm-embeddings-cache-scorer";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Producer instance to read (empty = default).
    pub producer_name: String,
}

/// Scores by encoder-cache match.
#[derive(Debug)]
pub struct MmCacheScorer {
    producer: Option<PluginName>,
}

impl MmCacheScorer {
    /// A scorer reading `producer` (None = the default producer).
    pub fn new(producer: Option<PluginName>) -> Self {
        Self { producer }
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let scorer = Arc::new(MmCacheScorer::new(producer_name(p.producer_name)));
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(scorer.clone()).with_consumer(scorer))
}

impl Consumer for MmCacheScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::EncoderCacheMatchInfo(self.producer.clone())]
    }
}

impl Scorer for MmCacheScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let Some(m) = cx.data.encoder_cache.get(self.producer.as_deref()).filter(|m| m.total_weight > 0) else {
            return vec![0.0; candidates.len()];
        };
        let total = m.total_weight as f64;
        candidates.iter().map(|c| (m.matched(c.id()) as f64 / total).min(1.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{EncoderCacheMatches, RequestData};
    use crate::test_util::{context_for, endpoint};

    fn data(name: &str) -> RequestData {
        let mut m = EncoderCacheMatches { total_weight: 80, ..Default::default() };
        m.per_endpoint.insert("a".into(), 80);
        m.per_endpoint.insert("b".into(), 20);
        RequestData { encoder_cache: ByProducer::only(name, Arc::new(m)), ..Default::default() }
    }

    #[test]
    fn fraction_of_the_request_weight() {
        let request = Default::default();
        let default = data("mm");
        let cx = context_for(&request, &default);
        let c = [endpoint("a").build(), endpoint("b").build(), endpoint("z").build()];
        assert_eq!(MmCacheScorer::new(None).score(&cx, &c), vec![1.0, 0.25, 0.0]);
        assert_eq!(MmCacheScorer::new(Some("other".into())).score(&cx, &c), vec![0.0; 3], "other producer: no data");
        let named = data("mine");
        let cx = context_for(&request, &named);
        assert_eq!(MmCacheScorer::new(Some("mine".into())).score(&cx, &c), vec![1.0, 0.25, 0.0]);
    }

    #[test]
    fn text_only_requests_score_zero() {
        let request = Default::default();
        let data = RequestData::default();
        let cx = context_for(&request, &data);
        assert_eq!(MmCacheScorer::new(None).score(&cx, &[endpoint("a").build()]), vec![0.0]);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&MmCacheScorer::new(None), &data("mm"));
    }

    #[test]
    fn parameters_are_strict() {
        let spec = |p: serde_json::Value| PluginSpec {
            name: "s".into(),
            type_name: TYPE.into(),
            parameters: p,
            path: "plugins[1]".into(),
        };
        let cx = BuildContext::default();
        let inst = build(&spec(serde_json::json!({"producerName": "mm2"})), &cx).expect("builds");
        let keys = inst.consumer.expect("consumer").consumes();
        assert_eq!(keys, vec![DataKey::EncoderCacheMatchInfo(Some("mm2".into()))]);
        let err = build(&spec(serde_json::json!({"producer": "x"})), &cx).expect_err("unknown key");
        assert_eq!(err.path, "plugins[1].parameters");
    }
}
