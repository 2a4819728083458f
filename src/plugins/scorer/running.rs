//! `running-requests-size-scorer`: prefers endpoints with fewer running requests. Min-max over
//! the candidates of `vllm:num_requests_running`: `(max - r) / (max - min)`; all equal -> 1.0.
//! No parameters.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, Scorer};
use crate::plugins::producer::passive::NoParams;

/// Type name.
pub const TYPE: &str = "running-requests-size-scorer";

/// Scores by running batch size.
#[derive(Debug, Default)]
pub struct RunningScorer;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(Arc::new(RunningScorer)))
}

impl Scorer for RunningScorer {
    fn score(&self, _: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        crate::plugins::load::score_known_first(candidates, |candidates| {
            let r: Vec<f64> = candidates.iter().map(|c| c.metrics.metrics.running_requests as f64).collect();
            super::min_max_inverse(&r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn fewer_running_scores_higher() {
        let (request, data) = (Default::default(), Default::default());
        let c = [endpoint("a").running(8).build(), endpoint("b").running(0).build(), endpoint("c").running(4).build()];
        assert_eq!(RunningScorer.score(&context_for(&request, &data), &c), vec![0.0, 1.0, 0.5]);
        super::super::contract::check(&RunningScorer, &Default::default());
    }
}
