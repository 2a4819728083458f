//! Pickers: choose the target endpoints from scored candidates. All take
//! `maxNumOfEndpoints` (default 1; values <= 0 mean 1); several targets become a
//! comma-separated fallback list in the destination. Random draws come from the build's
//! `framework::handles::RandomSource` (the thread RNG unless a driver such as the simulator
//! seeds it).

pub mod max_score;
pub mod random;
pub mod weighted_random;

use serde::Deserialize;

/// Parameters shared by every picker.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PickerParams {
    /// How many endpoints to return.
    pub max_num_of_endpoints: i64,
}

impl PickerParams {
    /// The effective count (>= 1).
    pub fn count(&self) -> usize {
        usize::try_from(self.max_num_of_endpoints).ok().filter(|n| *n > 0).unwrap_or(1)
    }
}

#[cfg(test)]
pub(crate) mod contract {
    //! Contract every picker satisfies: picks come from the input, without duplicates, and
    //! never more than asked.
    use crate::framework::plugin::{Picker, ScoredCandidate};
    use crate::test_util::{context_for, endpoint};

    /// Runs the contract on a picker built to return up to `n` endpoints.
    pub fn check(picker: &dyn Picker, n: usize) {
        let request = crate::request::InferenceRequest::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        for size in [1usize, 2, 5] {
            let scored: Vec<_> = (0..size)
                .map(|i| ScoredCandidate { candidate: endpoint(&format!("e{i}")).build(), score: i as f64 / 5.0 })
                .collect();
            let ids: Vec<String> = scored.iter().map(|s| s.candidate.id().to_string()).collect();
            let picked = picker.pick(&cx, scored);
            assert!(!picked.is_empty() && picked.len() <= n.min(size));
            let mut seen = std::collections::HashSet::new();
            for p in &picked {
                assert!(ids.contains(&p.id().to_string()));
                assert!(seen.insert(p.id().clone()));
            }
        }
    }
}
