//! Scoring arithmetic of `latency-scorer` over a chosen subset: the blend of two min-max
//! normalised signals, positive-tier headroom scores, negative-tier deficit scores and the
//! composite fallback. Pure functions over slices; every output is in [0, 1].

use crate::framework::data::LatencyPrediction;

/// Min-max normalisation of `v` (all zeros when the range is 0 or not finite).
fn normalise(v: &[f64]) -> (Vec<f64>, bool) {
    let (min, max) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let range = max - min;
    if !(range > 0.0 && range.is_finite()) {
        return (vec![0.0; v.len()], false);
    }
    (v.iter().map(|x| (x - min) / range).collect(), true)
}

/// `alpha x norm(a) + beta x norm(b)` with the weights normalised to sum 1; a signal whose
/// range is 0 gets weight 0 (the other gets 1). `None` when neither signal varies (or both
/// weights are 0): every member is equally good.
pub fn blend(a: &[f64], b: &[f64], weight_a: f64, weight_b: f64) -> Option<Vec<f64>> {
    let ((na, va), (nb, vb)) = (normalise(a), normalise(b));
    let (wa, wb) = match (va, vb) {
        (true, true) => (weight_a.max(0.0), weight_b.max(0.0)),
        (true, false) => (1.0, 0.0),
        (false, true) => (0.0, 1.0),
        (false, false) => return None,
    };
    let total = wa + wb;
    if total <= 0.0 {
        return None;
    }
    Some(na.iter().zip(&nb).map(|(x, y)| (wa * x + wb * y) / total).collect())
}

/// Positive tier: blended headroom; `most` = more headroom scores higher, else (`least`,
/// bin-packing) less headroom scores higher. All equal -> 1.0.
pub fn positive(p: &[LatencyPrediction], ttft_weight: f64, tpot_weight: f64, most: bool) -> Vec<f64> {
    let ttft: Vec<f64> = p.iter().map(|x| x.ttft_headroom_ms).collect();
    let tpot: Vec<f64> = p.iter().map(|x| x.tpot_headroom_ms).collect();
    match blend(&ttft, &tpot, ttft_weight, tpot_weight) {
        Some(c) if most => c,
        Some(c) => c.iter().map(|x| 1.0 - x).collect(),
        None => vec![1.0; p.len()],
    }
}

/// Deficit bucket of a negative-tier prediction: 3 = only TPOT misses (preferred), 2 = only
/// TTFT misses, 1 = both miss.
pub fn bucket(p: &LatencyPrediction) -> u8 {
    match (p.ttft_headroom_ms < 0.0, p.tpot_headroom_ms < 0.0) {
        (false, _) => 3,
        (true, false) => 2,
        (true, true) => 1,
    }
}

/// Negative tier (one bucket): the smallest blended deficit scores highest. All equal -> 1.0.
pub fn negative(p: &[LatencyPrediction], ttft_weight: f64, tpot_weight: f64) -> Vec<f64> {
    let ttft: Vec<f64> = p.iter().map(|x| (-x.ttft_headroom_ms).max(0.0)).collect();
    let tpot: Vec<f64> = p.iter().map(|x| (-x.tpot_headroom_ms).max(0.0)).collect();
    match blend(&ttft, &tpot, ttft_weight, tpot_weight) {
        Some(c) => c.iter().map(|x| 1.0 - x).collect(),
        None => vec![1.0; p.len()],
    }
}

/// Composite fallback: weighted mean of `1 - kv`, min-max inverse queue and prefix score.
pub fn composite(kv: &[f64], queue: &[f64], prefix: &[f64], weights: [f64; 3]) -> Vec<f64> {
    let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    if total <= 0.0 {
        return vec![0.0; kv.len()];
    }
    let queue = crate::plugins::scorer::min_max_inverse(queue);
    kv.iter()
        .zip(&queue)
        .zip(prefix)
        .map(|((k, q), p)| {
            let s = weights[0].max(0.0) * (1.0 - k.clamp(0.0, 1.0))
                + weights[1].max(0.0) * q
                + weights[2].max(0.0) * p.clamp(0.0, 1.0);
            s / total
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pred(ttft_headroom_ms: f64, tpot_headroom_ms: f64) -> LatencyPrediction {
        LatencyPrediction { ttft_ms: 0.0, tpot_ms: 0.0, ttft_headroom_ms, tpot_headroom_ms }
    }

    #[test]
    fn positive_least_and_most() {
        // The documented example: headrooms 120, 50, 30 ms (TPOT equal -> TTFT only).
        let p = [pred(120.0, 5.0), pred(50.0, 5.0), pred(30.0, 5.0)];
        let least = positive(&p, 0.8, 0.2, false);
        assert!((least[0] - 0.0).abs() < 1e-9 && (least[1] - 0.7777).abs() < 1e-3 && (least[2] - 1.0).abs() < 1e-9);
        let most = positive(&p, 0.8, 0.2, true);
        assert_eq!(most[0], 1.0);
        assert_eq!(positive(&[pred(1.0, 1.0), pred(1.0, 1.0)], 0.8, 0.2, true), [1.0, 1.0]);
    }

    #[test]
    fn negative_prefers_the_smallest_deficit_and_buckets() {
        let s = negative(&[pred(-100.0, -1.0), pred(-500.0, -1.0)], 0.8, 0.2);
        assert!(s[0] > s[1]);
        assert_eq!((bucket(&pred(-1.0, -1.0)), bucket(&pred(-1.0, 1.0)), bucket(&pred(1.0, -1.0))), (1, 2, 3));
    }

    #[test]
    fn composite_and_degenerate_input() {
        let s = composite(&[0.0, 1.0], &[0.0, 10.0], &[1.0, 0.0], [1.0, 1.0, 1.0]);
        assert_eq!(s, [1.0, 0.0]);
        assert_eq!(composite(&[0.5], &[1.0], &[0.5], [0.0, 0.0, 0.0]), [0.0]);
        assert_eq!(blend(&[f64::NAN, 1.0], &[0.0, 0.0], 1.0, 1.0), None);
    }
}
