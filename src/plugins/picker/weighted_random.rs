//! `weighted-random-picker`: A-Res weighted reservoir sampling. Each candidate gets the key
//! `U^(1/score)` for score > 0 (U uniform in (0,1)), 0 otherwise; the largest keys win. When
//! every score is <= 0 it picks at random. Parameters: `maxNumOfEndpoints` (1).

use std::sync::Arc;

use rand::Rng;
use rand::seq::SliceRandom;

use super::PickerParams;
use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::handles::RandomSource;
use crate::framework::plugin::{Picker, PluginInstance, ScoredCandidate};

/// Type name.
pub const TYPE: &str = "weighted-random-picker";

/// Picks with probability proportional to score.
#[derive(Debug)]
pub struct WeightedRandomPicker {
    count: usize,
    random: RandomSource,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: PickerParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_picker(Arc::new(WeightedRandomPicker { count: params.count(), random: cx.random.clone() })))
}

impl Picker for WeightedRandomPicker {
    fn pick(&self, _: &SchedulingContext<'_>, scored: Vec<ScoredCandidate>) -> Vec<Candidate> {
        self.random.with(|rng| self.pick_with(rng, scored))
    }
}

impl WeightedRandomPicker {
    fn pick_with(&self, rng: &mut dyn rand::RngCore, mut scored: Vec<ScoredCandidate>) -> Vec<Candidate> {
        if scored.iter().all(|s| s.score <= 0.0) {
            scored.shuffle(rng);
            return scored.into_iter().take(self.count).map(|s| s.candidate).collect();
        }
        let mut keyed: Vec<(f64, Candidate)> = scored
            .into_iter()
            .map(|s| {
                let key = if s.score > 0.0 {
                    let u: f64 = rng.random::<f64>().max(1e-10);
                    u.powf(1.0 / s.score)
                } else {
                    0.0
                };
                (key, s.candidate)
            })
            .collect();
        keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
        keyed.into_iter().take(self.count).map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn prefers_higher_scores_and_never_picks_zero_when_others_positive() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let picker = WeightedRandomPicker { count: 1, random: RandomSource::thread() };
        let (mut high, mut low) = (0, 0);
        for _ in 0..2000 {
            let scored = vec![
                ScoredCandidate { candidate: endpoint("hi").build(), score: 0.9 },
                ScoredCandidate { candidate: endpoint("lo").build(), score: 0.1 },
                ScoredCandidate { candidate: endpoint("zero").build(), score: 0.0 },
            ];
            match &*picker.pick(&cx, scored)[0].id().clone() {
                "hi" => high += 1,
                "lo" => low += 1,
                other => panic!("picked {other}"),
            }
        }
        assert!(high > low * 3, "high={high} low={low}");
    }

    #[test]
    fn contract() {
        super::super::contract::check(&WeightedRandomPicker { count: 2, random: RandomSource::thread() }, 2);
    }
}
