//! `prefix-cache-scorer`: prefers endpoints that already hold the request's prompt prefix.
//! Reads `PrefixCacheMatchInfo` from a producer (`prefixMatchInfoProducerName`, default: the
//! approximate producer, created automatically when none is declared).
//! Score (llm-d): `w * min(1, matchBlocks * blockSize / matchLengthScaleTokens)^2 +
//! (1 - w) * matchBlocks / totalBlocks` with `w = matchLengthWeight`.
//! Parameters: `prefixMatchInfoProducerName` (""), `matchLengthWeight` (0.0, in [0,1]),
//! `matchLengthScaleTokens` (8192; > 0 when the weight is > 0).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, Scorer};

/// Type name.
pub const TYPE: &str = "prefix-cache-scorer";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Producer instance to read (empty = default).
    pub prefix_match_info_producer_name: String,
    /// Weight of the absolute match length term.
    pub match_length_weight: f64,
    /// Token count at which the length term saturates.
    pub match_length_scale_tokens: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            prefix_match_info_producer_name: String::new(),
            match_length_weight: 0.0,
            match_length_scale_tokens: 8192,
        }
    }
}

/// Scores by prefix match.
#[derive(Debug)]
pub struct PrefixCacheScorer {
    producer: Option<PluginName>,
    length_weight: f64,
    scale_tokens: f64,
}

impl PrefixCacheScorer {
    /// A scorer reading `producer` (None = default) with the ratio-only formula.
    pub fn new(producer: Option<PluginName>) -> Self {
        Self { producer, length_weight: 0.0, scale_tokens: 8192.0 }
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if !(0.0..=1.0).contains(&p.match_length_weight) {
        return Err(BuildError::new(format!("{}.parameters.matchLengthWeight", spec.path), "must be within [0, 1]"));
    }
    if p.match_length_weight > 0.0 && p.match_length_scale_tokens == 0 {
        return Err(BuildError::new(
            format!("{}.parameters.matchLengthScaleTokens", spec.path),
            "must be > 0 when matchLengthWeight > 0",
        ));
    }
    let producer = Some(p.prefix_match_info_producer_name).filter(|s| !s.is_empty()).map(PluginName::from);
    let scorer = Arc::new(PrefixCacheScorer {
        producer,
        length_weight: p.match_length_weight,
        scale_tokens: p.match_length_scale_tokens as f64,
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(scorer.clone()).with_consumer(scorer))
}

impl Consumer for PrefixCacheScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::PrefixCacheMatchInfo(self.producer.clone())]
    }
}

impl Scorer for PrefixCacheScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let Some(m) = cx.data.prefix.get(self.producer.as_deref()) else {
            return vec![0.0; candidates.len()];
        };
        if m.total_blocks == 0 {
            return vec![0.0; candidates.len()];
        }
        candidates
            .iter()
            .map(|c| {
                let info = m.get(c.id());
                let ratio = info.weighted_blocks / m.total_blocks as f64;
                if self.length_weight == 0.0 {
                    return ratio;
                }
                let tokens = info.match_blocks as f64 * m.block_size_tokens as f64;
                let length = (tokens / self.scale_tokens).min(1.0);
                self.length_weight * length * length + (1.0 - self.length_weight) * ratio
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{MatchInfo, PrefixMatches, RequestData};
    use crate::test_util::{context_for, endpoint};

    fn data() -> RequestData {
        let mut m = PrefixMatches { block_size_tokens: 64, total_blocks: 4, ..Default::default() };
        m.per_endpoint.insert("a".into(), MatchInfo { match_blocks: 3, weighted_blocks: 3.0 });
        m.per_endpoint.insert("b".into(), MatchInfo { match_blocks: 1, weighted_blocks: 0.8 });
        RequestData { prefix: ByProducer::only("approx", Arc::new(m)), ..Default::default() }
    }

    #[test]
    fn ratio_of_matched_blocks() {
        let request = Default::default();
        let data = data();
        let cx = context_for(&request, &data);
        let c = [endpoint("a").build(), endpoint("b").build(), endpoint("z").build()];
        assert_eq!(PrefixCacheScorer::new(None).score(&cx, &c), vec![0.75, 0.2, 0.0]);
    }

    #[test]
    fn length_term_blends_in() {
        let request = Default::default();
        let data = data();
        let cx = context_for(&request, &data);
        let s = PrefixCacheScorer { producer: None, length_weight: 0.5, scale_tokens: 256.0 };
        let scores = s.score(&cx, &[endpoint("a").build()]);
        // 3 blocks x 64 = 192 tokens -> (0.75)^2 * 0.5 + 0.75 * 0.5
        assert!((scores[0] - (0.5 * 0.5625 + 0.5 * 0.75)).abs() < 1e-9);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&PrefixCacheScorer::new(None), &data());
    }
}
