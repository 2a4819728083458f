//! Scorers: map each candidate to [0, 1] (higher is better). The engine multiplies by the
//! profile weight and sums.

pub mod active_request;
pub mod context_length;
pub mod kv_utilization;
pub mod latency;
pub mod load_aware;
pub mod lora;
pub mod mm_cache;
pub mod no_hit_lru;
pub mod precise_prefix;
pub mod prefix_cache;
pub mod queue;
pub mod running;
pub mod session_affinity;
pub mod token_load;

use crate::framework::plugin::PluginName;

/// A `...ProducerName` parameter: empty = the default producer of that kind.
pub fn producer_name(name: String) -> Option<PluginName> {
    Some(name).filter(|s| !s.is_empty()).map(PluginName::from)
}

/// Min-max score of a load figure over the candidates: `(max - v) / (max - min)`, 1.0 for
/// every candidate when all values are equal.
pub fn min_max_inverse(values: &[f64]) -> Vec<f64> {
    let (min, max) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if max.is_nan() || min.is_nan() || max <= min {
        return vec![1.0; values.len()];
    }
    values.iter().map(|v| (max - v) / (max - min)).collect()
}

#[cfg(test)]
pub(crate) mod contract {
    //! Contract every scorer satisfies: exactly one score per candidate, each in [0, 1].
    use crate::framework::data::RequestData;
    use crate::framework::plugin::Scorer;
    use crate::test_util::{context_for, endpoint};

    /// Runs the contract over a few candidate sets.
    pub fn check(scorer: &dyn Scorer, data: &RequestData) {
        let request = crate::test_util::chat_request("m", &["hello world"]);
        let cx = context_for(&request, data);
        for n in [0usize, 1, 3] {
            let candidates: Vec<_> =
                (0..n).map(|i| endpoint(&format!("e{i}")).waiting(i as u64).kv_usage(0.1 * i as f64).build()).collect();
            let scores = scorer.score(&cx, &candidates);
            assert_eq!(scores.len(), n);
            assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
        }
    }
}
