//! The one rule every load-based plugin follows for endpoints whose load is unknown.
//!
//! An endpoint's metrics are *unknown* when no scrape succeeded within
//! `--metrics-staleness-threshold`, or the last scrape reported invalid values
//! ([`crate::endpoints::model::MetricsState::known`], judged once per request when the
//! candidates are taken). Unknown metrics read as zeros, i.e. as an idle pod; without this
//! rule a pod whose `/metrics` fails would attract all the traffic (a black hole).
//!
//! Load-based scorers wrap their scoring in [`score_known_first`]: with a mix of known and
//! unknown endpoints the scorer sees only the known ones, their scores are lifted into
//! `[KNOWN_FLOOR, 1]` and every unknown endpoint scores [`UNKNOWN_SCORE`], strictly below.
//! When all or none of the candidates are known the scorer runs unchanged (nothing better to
//! compare against). Load-based filters drop unknown endpoints ([`keeps_known`]) and fail open
//! as before when nothing is left.

use crate::endpoints::model::Candidate;

/// Score of an endpoint with unknown metrics when some candidates are known.
pub const UNKNOWN_SCORE: f64 = 0.0;

/// Lowest score of a known endpoint when some candidates are unknown.
pub const KNOWN_FLOOR: f64 = 0.01;

/// Scores `candidates` with `score` (one value in [0, 1] per candidate it is given) so that
/// every endpoint with unknown metrics ranks below every endpoint with known metrics.
pub fn score_known_first(candidates: &[Candidate], score: impl FnOnce(&[Candidate]) -> Vec<f64>) -> Vec<f64> {
    let known = candidates.iter().filter(|c| c.metrics_known).count();
    if known == candidates.len() || known == 0 {
        return score(candidates);
    }
    let subset: Vec<Candidate> = candidates.iter().filter(|c| c.metrics_known).cloned().collect();
    let mut scores = score(&subset).into_iter();
    candidates
        .iter()
        .map(|c| match c.metrics_known {
            true => KNOWN_FLOOR + (1.0 - KNOWN_FLOOR) * scores.next().unwrap_or(0.0).clamp(0.0, 1.0),
            false => UNKNOWN_SCORE,
        })
        .collect()
}

/// Whether a load-based filter may keep `candidate` at all (its load is known).
pub fn keeps_known(candidate: &Candidate) -> bool {
    candidate.metrics_known
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::endpoint;

    fn idle_looking_scores(c: &[Candidate]) -> Vec<f64> {
        // A scorer that prefers low queues: the unknown pod reads as queue 0.
        let q: Vec<f64> = c.iter().map(|c| c.metrics.metrics.waiting_queue_size as f64).collect();
        crate::plugins::scorer::min_max_inverse(&q)
    }

    #[test]
    fn unknown_endpoints_score_below_every_known_one() {
        let c = [
            endpoint("busy").waiting(9).build(),
            endpoint("never-scraped").fresh(false).build(),
            endpoint("idle").waiting(1).build(),
            endpoint("nan").invalid().build(),
        ];
        let s = score_known_first(&c, idle_looking_scores);
        assert_eq!(s[1], UNKNOWN_SCORE);
        assert_eq!(s[3], UNKNOWN_SCORE);
        assert!(s[0] >= KNOWN_FLOOR && s[0] < s[2] && s[2] == 1.0, "{s:?}");
    }

    #[test]
    fn all_known_or_all_unknown_score_unchanged() {
        let known = [endpoint("a").waiting(4).build(), endpoint("b").waiting(0).build()];
        assert_eq!(score_known_first(&known, idle_looking_scores), vec![0.0, 1.0]);
        let unknown = [endpoint("a").fresh(false).build(), endpoint("b").invalid().build()];
        assert_eq!(score_known_first(&unknown, idle_looking_scores), vec![1.0, 1.0]);
    }

    #[test]
    fn ten_thousand_endpoints_with_one_unknown() {
        let mut c: Vec<Candidate> =
            (0..10_000).map(|i| endpoint(&format!("e{i}")).waiting(5 + i % 3).build()).collect();
        c[4_321] = endpoint("broken").fresh(false).build();
        let s = score_known_first(&c, idle_looking_scores);
        let best_unknown = s[4_321];
        let worst_known = s.iter().enumerate().filter(|(i, _)| *i != 4_321).map(|(_, v)| *v).fold(1.0, f64::min);
        assert!(best_unknown < worst_known, "{best_unknown} vs {worst_known}");
    }
}
