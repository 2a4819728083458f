//! `kv-cache-utilization-scorer` (deprecated alias `kv-cache-scorer`): prefers endpoints with
//! free KV cache: `1 - kv_cache_usage` (vLLM reports a fraction). No parameters.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, Scorer};

/// Type name.
pub const TYPE: &str = "kv-cache-utilization-scorer";
/// Older GIE name, still accepted.
pub const OLD_TYPE: &str = "kv-cache-scorer";

/// Scores by free KV cache.
#[derive(Debug, Default)]
pub struct KvUtilizationScorer;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: super::super::producer::passive::NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(Arc::new(KvUtilizationScorer)))
}

impl Scorer for KvUtilizationScorer {
    fn score(&self, _: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        crate::plugins::load::score_known_first(candidates, |candidates| {
            candidates.iter().map(|c| (1.0 - c.metrics.metrics.kv_cache_usage).clamp(0.0, 1.0)).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn free_cache_scores_higher() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let c = [endpoint("a").kv_usage(0.75).build(), endpoint("b").kv_usage(0.0).build()];
        assert_eq!(KvUtilizationScorer.score(&cx, &c), vec![0.25, 1.0]);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&KvUtilizationScorer, &Default::default());
    }
}
