//! `queue-scorer`: prefers endpoints with fewer waiting requests. Min-max over the candidates
//! of `vllm:num_requests_waiting`: `(max - q) / (max - min)`; all equal -> 1.0. No parameters.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, Scorer};

/// Type name.
pub const TYPE: &str = "queue-scorer";

/// Scores by waiting-queue depth.
#[derive(Debug, Default)]
pub struct QueueScorer;

/// Factory (no parameters; any given are an error).
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: super::super::producer::passive::NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(Arc::new(QueueScorer)))
}

impl Scorer for QueueScorer {
    fn score(&self, _: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        crate::plugins::load::score_known_first(candidates, |candidates| {
            let q: Vec<f64> = candidates.iter().map(|c| c.metrics.metrics.waiting_queue_size as f64).collect();
            super::min_max_inverse(&q)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn shorter_queue_scores_higher() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let c = [endpoint("a").waiting(10).build(), endpoint("b").waiting(0).build(), endpoint("c").waiting(5).build()];
        assert_eq!(QueueScorer.score(&cx, &c), vec![0.0, 1.0, 0.5]);
        let same = [endpoint("a").waiting(3).build(), endpoint("b").waiting(3).build()];
        assert_eq!(QueueScorer.score(&cx, &same), vec![1.0, 1.0]);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&QueueScorer, &Default::default());
    }
}
