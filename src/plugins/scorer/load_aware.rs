//! `load-aware-scorer`: a bounded queue-depth score. With `q` = waiting requests: `q == 0` ->
//! 0.5; `q >= threshold` -> 0; else `0.5 x (1 - q / threshold)` (at most 0.5 by design, so an
//! idle endpoint never outweighs affinity scorers). Parameters: `threshold` (128; <= 0 means
//! the default).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, Scorer};

/// Type name.
pub const TYPE: &str = "load-aware-scorer";
const DEFAULT_THRESHOLD: f64 = 128.0;

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Queue depth that scores 0.
    pub threshold: i64,
}

/// The scorer.
#[derive(Debug)]
pub struct LoadAwareScorer {
    threshold: f64,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let threshold = if p.threshold > 0 { p.threshold as f64 } else { DEFAULT_THRESHOLD };
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(Arc::new(LoadAwareScorer { threshold })))
}

impl Scorer for LoadAwareScorer {
    fn score(&self, _: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        crate::plugins::load::score_known_first(candidates, |candidates| {
            candidates.iter().map(|c| self.queue_score(c.metrics.metrics.waiting_queue_size as f64)).collect()
        })
    }
}

impl LoadAwareScorer {
    /// 0.5 for an empty queue, falling linearly to 0 at the threshold.
    fn queue_score(&self, q: f64) -> f64 {
        if q == 0.0 {
            0.5
        } else if q >= self.threshold {
            0.0
        } else {
            0.5 * (1.0 - q / self.threshold)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn bounded_by_one_half() {
        let (request, data) = (Default::default(), Default::default());
        let s = LoadAwareScorer { threshold: 10.0 };
        let c = [endpoint("a").waiting(0).build(), endpoint("b").waiting(5).build(), endpoint("c").waiting(10).build()];
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.5, 0.25, 0.0]);
        super::super::contract::check(&s, &Default::default());
    }
}
