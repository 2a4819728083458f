//! `max-score-picker`: the endpoints with the highest total score; ties broken at random
//! (shuffle, then a stable sort by score descending). Parameters: `maxNumOfEndpoints` (1).

use std::sync::Arc;

use rand::seq::SliceRandom;

use super::PickerParams;
use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::handles::RandomSource;
use crate::framework::plugin::{Picker, PluginInstance, ScoredCandidate};

/// Type name.
pub const TYPE: &str = "max-score-picker";

/// Picks the top-scored endpoints.
#[derive(Debug)]
pub struct MaxScorePicker {
    count: usize,
    random: RandomSource,
}

impl MaxScorePicker {
    /// A picker returning up to `count` endpoints, breaking ties with `random`.
    pub fn new(count: usize, random: RandomSource) -> Self {
        Self { count: count.max(1), random }
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: PickerParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_picker(Arc::new(MaxScorePicker::new(params.count(), cx.random.clone()))))
}

impl Picker for MaxScorePicker {
    fn pick(&self, _: &SchedulingContext<'_>, mut scored: Vec<ScoredCandidate>) -> Vec<Candidate> {
        self.random.with(|rng| scored.shuffle(rng));
        scored.sort_by(|a, b| b.score.total_cmp(&a.score));
        scored.into_iter().take(self.count).map(|s| s.candidate).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn picks_highest_and_breaks_ties_randomly() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let picker = MaxScorePicker::new(1, RandomSource::thread());
        let scored = |a: f64, b: f64, c: f64| {
            vec![
                ScoredCandidate { candidate: endpoint("a").build(), score: a },
                ScoredCandidate { candidate: endpoint("b").build(), score: b },
                ScoredCandidate { candidate: endpoint("c").build(), score: c },
            ]
        };
        assert_eq!(&**picker.pick(&cx, scored(0.1, 0.9, 0.5))[0].id(), "b");
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            seen.insert(picker.pick(&cx, scored(1.0, 1.0, 0.0))[0].id().to_string());
        }
        assert_eq!(seen.len(), 2, "ties between a and b must both be picked sometimes");
        assert!(!seen.contains("c"));
    }

    #[test]
    fn returns_a_sorted_fallback_list() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let scored = vec![
            ScoredCandidate { candidate: endpoint("a").build(), score: 0.2 },
            ScoredCandidate { candidate: endpoint("b").build(), score: 0.9 },
            ScoredCandidate { candidate: endpoint("c").build(), score: 0.5 },
        ];
        let ids: Vec<_> = MaxScorePicker::new(2, RandomSource::thread())
            .pick(&cx, scored)
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        assert_eq!(ids, ["b", "c"]);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&MaxScorePicker::new(2, RandomSource::thread()), 2);
    }
}
