//! `context-length-aware`: routes by prompt length to endpoints labelled with the context
//! range they are tuned for (label value `"min-max"` in tokens, e.g. `0-8192`). With `len` =
//! the `TokenizedPrompt` length and `width = max - min`:
//! - in range: `0.3 + 0.7 x (len + 1) / (width + len + 1)` in (0.3, 1] (narrower ranges score
//!   higher);
//! - out of range by `d` tokens: `0.3 x (1 - min(1, d / max(len, 1)))` in [0, 0.3) (closer
//!   ranges score higher);
//! - unlabelled or unparsable label: 0.5.
//!
//! With `enableFiltering` it is also a filter that drops labelled endpoints whose range does
//! not contain `len` (unlabelled endpoints stay). Parameters: `label`
//! (`llm-d.ai/context-length-range`), `enableFiltering` (false).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, Filter, PluginInstance, Scorer};

/// Type name.
pub const TYPE: &str = "context-length-aware";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Label holding `min-max`.
    pub label: String,
    /// Also filter out endpoints whose range excludes the request.
    pub enable_filtering: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self { label: "llm-d.ai/context-length-range".into(), enable_filtering: false }
    }
}

/// The scorer (and optional filter).
#[derive(Debug)]
pub struct ContextLengthAware {
    label: String,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if p.label.is_empty() {
        return Err(BuildError::new(format!("{}.parameters.label", spec.path), "must not be empty"));
    }
    let s = Arc::new(ContextLengthAware { label: p.label });
    let inst = PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_consumer(s.clone());
    Ok(if p.enable_filtering { inst.with_filter(s) } else { inst })
}

fn range(value: &str) -> Option<(u64, u64)> {
    let (lo, hi) = value.split_once('-')?;
    let (lo, hi) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
    (lo <= hi).then_some((lo, hi))
}

impl ContextLengthAware {
    fn range_of(&self, c: &Candidate) -> Option<(u64, u64)> {
        c.endpoint.label(&self.label).and_then(range)
    }
}

fn length(cx: &SchedulingContext<'_>) -> u64 {
    cx.data.tokens.as_ref().map_or(0, |t| t.len() as u64)
}

impl Consumer for ContextLengthAware {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt]
    }
}

impl Scorer for ContextLengthAware {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let len = length(cx);
        candidates
            .iter()
            .map(|c| match self.range_of(c) {
                None => 0.5,
                Some((lo, hi)) if (lo..=hi).contains(&len) => {
                    0.3 + 0.7 * (len + 1) as f64 / ((hi - lo) + len + 1) as f64
                }
                Some((lo, hi)) => {
                    let d = if len < lo { lo - len } else { len - hi };
                    0.3 * (1.0 - (d as f64 / len.max(1) as f64).min(1.0))
                }
            })
            .collect()
    }
}

impl Filter for ContextLengthAware {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let len = length(cx);
        candidates.into_iter().filter(|c| self.range_of(c).is_none_or(|(lo, hi)| (lo..=hi).contains(&len))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::RequestData;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn narrow_matching_range_wins() {
        let s = ContextLengthAware { label: "llm-d.ai/context-length-range".into() };
        let data = RequestData { tokens: Some(vec![1u32; 1000].into()), ..Default::default() };
        let request = Default::default();
        let cx = context_for(&request, &data);
        let c = [
            endpoint("narrow").label(&s.label, "0-2000").build(),
            endpoint("wide").label(&s.label, "0-100000").build(),
            endpoint("short").label(&s.label, "0-500").build(),
            endpoint("plain").build(),
        ];
        let scores = s.score(&cx, &c);
        assert!(scores[0] > scores[1] && scores[1] > 0.3, "{scores:?}");
        assert!(scores[2] < 0.3 && scores[2] > 0.0, "{scores:?}");
        assert_eq!(scores[3], 0.5);
        let kept: Vec<String> = s.filter(&cx, c.to_vec()).iter().map(|c| c.id().to_string()).collect();
        assert_eq!(kept, ["narrow", "wide", "plain"]);
        super::super::contract::check(&s, &data);
        crate::plugins::filter::contract::check(&s);
    }
}
