//! `lora-affinity-scorer`: prefers endpoints that already run the request's LoRA adapter (the
//! target model after any rewrite). Target in the active adapters -> 1.0; else room for
//! another adapter (active + waiting count < max) -> 0.8; else target among the waiting
//! adapters -> 0.6; else 0. No parameters.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, Scorer};
use crate::plugins::producer::passive::NoParams;

/// Type name.
pub const TYPE: &str = "lora-affinity-scorer";

/// Scores by adapter residency.
#[derive(Debug, Default)]
pub struct LoraScorer;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(Arc::new(LoraScorer)))
}

impl Scorer for LoraScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let model = cx.request.target_model.as_str();
        crate::plugins::load::score_known_first(candidates, |candidates| {
            candidates
                .iter()
                .map(|c| {
                    let m = &c.metrics.metrics;
                    let loaded = (m.active_models.len() + m.waiting_models.len()) as u64;
                    if m.active_models.iter().any(|a| a == model) {
                        1.0
                    } else if m.max_active_models.is_some_and(|max| loaded < max) {
                        0.8
                    } else if m.waiting_models.iter().any(|w| w == model) {
                        0.6
                    } else {
                        0.0
                    }
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chat_request, context_for, endpoint};

    #[test]
    fn active_then_room_then_waiting() {
        let request = chat_request("ad", &["x"]);
        let data = Default::default();
        let c = [
            endpoint("a").lora(&["ad"], &[], 2).build(),
            endpoint("b").lora(&["x"], &[], 2).build(),
            endpoint("c").lora(&["x"], &["ad"], 2).build(),
            endpoint("d").lora(&["x", "y"], &[], 2).build(),
        ];
        assert_eq!(LoraScorer.score(&context_for(&request, &data), &c), vec![1.0, 0.8, 0.6, 0.0]);
        super::super::contract::check(&LoraScorer, &Default::default());
    }
}
