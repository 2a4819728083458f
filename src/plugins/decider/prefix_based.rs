//! `prefix-based-pd-decider`: disaggregates when the part of the prompt the chosen decode
//! endpoint has not cached is long enough to be worth a remote prefill.
//!
//! With `inputTokens` = the `TokenizedPrompt` length and `cached` = matched blocks x block
//! size on the decode endpoint (from the default `PrefixCacheMatchInfo` producer): false when
//! `nonCachedTokens` is 0, when `promptTokens > 0` and `inputTokens < promptTokens`, when
//! `inputTokens < nonCachedTokens`, or when no prefix data or no decode endpoint is known;
//! otherwise true iff `inputTokens - cached >= nonCachedTokens`.
//!
//! Parameters: `nonCachedTokens` (0 = never disaggregate), `promptTokens` (0 = no minimum);
//! negative values are rejected.

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, Decider, PluginInstance};

/// Type name.
pub const TYPE: &str = "prefix-based-pd-decider";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Minimum uncached tokens to disaggregate (0 = disabled).
    pub non_cached_tokens: i64,
    /// Minimum prompt length to disaggregate (0 = no minimum).
    pub prompt_tokens: i64,
}

/// The decider.
#[derive(Debug, Clone, Copy)]
pub struct PrefixBasedDecider {
    non_cached_tokens: u64,
    prompt_tokens: u64,
}

impl PrefixBasedDecider {
    /// A decider with the given thresholds.
    pub fn new(non_cached_tokens: u64, prompt_tokens: u64) -> Self {
        Self { non_cached_tokens, prompt_tokens }
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let non_negative = |v: i64, key: &str| {
        u64::try_from(v).map_err(|_| BuildError::new(format!("{}.parameters.{key}", spec.path), "must be >= 0"))
    };
    let decider = Arc::new(PrefixBasedDecider::new(
        non_negative(p.non_cached_tokens, "nonCachedTokens")?,
        non_negative(p.prompt_tokens, "promptTokens")?,
    ));
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_decider(decider.clone()).with_consumer(decider))
}

impl Consumer for PrefixBasedDecider {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt, DataKey::PrefixCacheMatchInfo(None)]
    }
}

impl Decider for PrefixBasedDecider {
    fn disaggregate(&self, cx: &SchedulingContext<'_>, decode_endpoint: Option<&Candidate>) -> bool {
        if self.non_cached_tokens == 0 {
            return false;
        }
        let input = cx.data.tokens.as_ref().map_or(0, |t| t.len() as u64);
        if (self.prompt_tokens > 0 && input < self.prompt_tokens) || input < self.non_cached_tokens {
            return false;
        }
        let (Some(endpoint), Some(matches)) = (decode_endpoint, cx.data.prefix.get(None)) else {
            return false;
        };
        let cached = (matches.get(endpoint.id()).match_blocks * matches.block_size_tokens) as u64;
        input.saturating_sub(cached) >= self.non_cached_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{MatchInfo, PrefixMatches, RequestData};
    use crate::test_util::{context_for, endpoint};

    fn data(tokens: usize, matched_blocks: usize) -> RequestData {
        let mut m = PrefixMatches { block_size_tokens: 16, total_blocks: tokens.div_ceil(16), ..Default::default() };
        m.per_endpoint
            .insert("d".into(), MatchInfo { match_blocks: matched_blocks, weighted_blocks: matched_blocks as f64 });
        RequestData {
            tokens: Some(vec![1u32; tokens].into()),
            prefix: ByProducer::only("p", Arc::new(m)),
            ..Default::default()
        }
    }

    fn decide(d: PrefixBasedDecider, data: &RequestData) -> bool {
        let request = Default::default();
        d.disaggregate(&context_for(&request, data), Some(&endpoint("d").build()))
    }

    #[test]
    fn uncached_tokens_against_the_threshold() {
        // 256 tokens, 10 blocks x 16 = 160 cached -> 96 uncached.
        assert!(decide(PrefixBasedDecider::new(96, 0), &data(256, 10)));
        assert!(!decide(PrefixBasedDecider::new(97, 0), &data(256, 10)));
        assert!(!decide(PrefixBasedDecider::new(0, 0), &data(256, 0)), "0 disables");
        assert!(!decide(PrefixBasedDecider::new(10, 300), &data(256, 0)), "prompt shorter than promptTokens");
        assert!(!decide(PrefixBasedDecider::new(300, 0), &data(256, 0)), "prompt shorter than nonCachedTokens");
        let request = Default::default();
        let d = data(256, 0);
        assert!(!PrefixBasedDecider::new(10, 0).disaggregate(&context_for(&request, &d), None), "no decode endpoint");
    }

    #[test]
    fn negative_parameters_are_rejected() {
        let spec = PluginSpec {
            name: "d".into(),
            type_name: TYPE.into(),
            parameters: serde_json::json!({"nonCachedTokens": -1}),
            path: "plugins[1]".into(),
        };
        assert_eq!(build(&spec, &BuildContext::default()).unwrap_err().path, "plugins[1].parameters.nonCachedTokens");
    }
}
