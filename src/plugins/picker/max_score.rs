//! `max-score-picker`: the endpoints with the highest total score; ties broken at random.
//! Parameters: `maxNumOfEndpoints` (1).
//!
//! Linear in the candidates: one endpoint is one pass that keeps the best and replaces it by
//! the i-th equal score with probability 1/i (each tied endpoint equally likely); several are
//! a shuffle, a selection of the top `maxNumOfEndpoints` and a sort of those only (after the
//! shuffle tied endpoints are interchangeable, so which of them make the cut is uniform).
//! Sorting every candidate cost a quarter of a decision's instructions at 1,000 endpoints.

use std::cmp::Ordering;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};

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
        if self.count == 1 {
            return self.random.with(|rng| best_of(rng, scored)).into_iter().collect();
        }
        self.random.with(|rng| scored.shuffle(rng));
        let descending = |a: &ScoredCandidate, b: &ScoredCandidate| b.score.total_cmp(&a.score);
        let kept = self.count.min(scored.len());
        if kept < scored.len() {
            scored.select_nth_unstable_by(kept - 1, descending);
            scored.truncate(kept);
        }
        scored.sort_by(descending);
        scored.into_iter().map(|s| s.candidate).collect()
    }
}

/// The candidate with the highest score, one pass; among equal highest scores, the i-th seen
/// replaces the pick with probability 1/i, so each is picked with equal probability.
fn best_of(rng: &mut dyn RngCore, scored: Vec<ScoredCandidate>) -> Option<Candidate> {
    let mut best: Option<ScoredCandidate> = None;
    let mut ties = 0u32;
    for s in scored {
        match best.as_ref().map(|b| s.score.total_cmp(&b.score)) {
            None | Some(Ordering::Greater) => {
                best = Some(s);
                ties = 1;
            }
            Some(Ordering::Equal) => {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = Some(s);
                }
            }
            Some(Ordering::Less) => {}
        }
    }
    best.map(|b| b.candidate)
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
    fn every_tied_best_is_picked_about_equally_often_and_the_cut_is_exact() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let scored = |scores: &[f64]| -> Vec<ScoredCandidate> {
            scores
                .iter()
                .enumerate()
                .map(|(i, s)| ScoredCandidate { candidate: endpoint(&format!("e{i}")).build(), score: *s })
                .collect()
        };
        let one = MaxScorePicker::new(1, RandomSource::seeded(7));
        let mut seen = std::collections::HashMap::<String, u32>::new();
        for _ in 0..3000 {
            let pick = one.pick(&cx, scored(&[0.5, 1.0, 0.2, 1.0, 1.0]));
            *seen.entry(pick[0].id().to_string()).or_default() += 1;
        }
        assert_eq!(seen.len(), 3, "only the three best: {seen:?}");
        assert!(seen.values().all(|n| (850..=1150).contains(n)), "about 1000 each: {seen:?}");
        assert!(one.pick(&cx, Vec::new()).is_empty());

        let three = MaxScorePicker::new(3, RandomSource::seeded(7));
        let ids: Vec<String> =
            three.pick(&cx, scored(&[0.1, 0.9, 0.3, 0.8, 0.7, 0.2])).iter().map(|c| c.id().to_string()).collect();
        assert_eq!(ids, ["e1", "e3", "e4"]);
        let all = MaxScorePicker::new(8, RandomSource::seeded(7)).pick(&cx, scored(&[0.1, 0.9]));
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&MaxScorePicker::new(2, RandomSource::thread()), 2);
    }
}
