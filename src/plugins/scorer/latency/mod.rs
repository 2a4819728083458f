//! `latency-scorer`: scores candidates by predicted-latency headroom
//! (`LatencyPredictionInfo` from a `predicted-latency-producer`).
//!
//! Steps over the candidates that have a prediction (the others score 0):
//! 1. Global affinity gate: with prefix score `matchBlocks/totalBlocks`, keep those with score
//!    `>= affinityGateTauGlobal` when any (skipped with probability `epsilonExploreSticky`, or
//!    when the best sticky predicted TTFT exceeds the best other by more than
//!    `affinityMaxTTFTPenaltyMs`).
//! 2. Tiers: positive = both headrooms >= 0. Both tiers present -> the negative tier with
//!    probability `epsilonExploreNeg`, else the positive one.
//! 3. Within-tier affinity gate with `affinityGateTau` (same rules).
//! 4. Positive tier: blend of min-max normalised TTFT/TPOT headroom (`ttftWeight`,
//!    `tpotWeight`; a dimension with no spread gets weight 0); `least` scores `1 - blend`
//!    (bin-packing), `most` scores `blend`. Negative tier: idle candidates (no running or
//!    waiting requests) first; then the best deficit bucket (only TPOT misses > only TTFT
//!    misses > both miss); within it `1 - blend` of the deficits (`negHeadroomTTFTWeight`,
//!    `negHeadroomTPOTWeight`). `composite-only` scores the subset with the composite instead.
//!
//! No predictions at all -> composite fallback over all candidates: weighted mean of
//! `1 - kvCacheUsage`, min-max inverse waiting queue and prefix score
//! (`compositeKVWeight`, `compositeQueueWeight`, `compositePrefixWeight`, 1 each).
//!
//! Parameters (defaults): `ttftWeight` 0.8, `tpotWeight` 0.2, `negHeadroomTTFTWeight` 0.8,
//! `negHeadroomTPOTWeight` 0.2 (all >= 0), `affinityGateTauGlobal` 0.99, `affinityGateTau`
//! 0.80, `epsilonExploreSticky` 0.01, `epsilonExploreNeg` 0.01 (all in [0, 1]; tau 0 = gate
//! off), `affinityMaxTTFTPenaltyMs` 5000 (>= 0; 0 = always stick), `headroomSelectionStrategy`
//! `least` | `most` | `composite-only`, the composite weights, `prefixMatchInfoProducerName`,
//! `latencyPredictionInfoProducerName`.

mod math;

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::LatencyPrediction;
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, Scorer};
use crate::plugins::filter::slo_headroom_tier::pick_positive;
use crate::plugins::scorer::producer_name;

/// Type name.
pub const TYPE: &str = "latency-scorer";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Positive-tier TTFT weight.
    #[serde(rename = "ttftWeight")]
    pub ttft_weight: f64,
    /// Positive-tier TPOT weight.
    #[serde(rename = "tpotWeight")]
    pub tpot_weight: f64,
    /// Negative-tier TTFT deficit weight.
    #[serde(rename = "negHeadroomTTFTWeight")]
    pub neg_ttft_weight: f64,
    /// Negative-tier TPOT deficit weight.
    #[serde(rename = "negHeadroomTPOTWeight")]
    pub neg_tpot_weight: f64,
    /// Global sticky threshold.
    pub affinity_gate_tau_global: f64,
    /// Within-tier sticky threshold.
    pub affinity_gate_tau: f64,
    /// Probability of skipping the global gate.
    pub epsilon_explore_sticky: f64,
    /// Probability of scoring the negative tier.
    pub epsilon_explore_neg: f64,
    /// TTFT cost that breaks stickiness, ms.
    #[serde(rename = "affinityMaxTTFTPenaltyMs")]
    pub affinity_max_ttft_penalty_ms: f64,
    /// `least`, `most` or `composite-only`.
    pub headroom_selection_strategy: String,
    /// Composite KV weight.
    #[serde(rename = "compositeKVWeight")]
    pub composite_kv_weight: f64,
    /// Composite queue weight.
    pub composite_queue_weight: f64,
    /// Composite prefix weight.
    pub composite_prefix_weight: f64,
    /// Prefix producer.
    pub prefix_match_info_producer_name: String,
    /// Latency producer.
    pub latency_prediction_info_producer_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            ttft_weight: 0.8,
            tpot_weight: 0.2,
            neg_ttft_weight: 0.8,
            neg_tpot_weight: 0.2,
            affinity_gate_tau_global: 0.99,
            affinity_gate_tau: 0.80,
            epsilon_explore_sticky: 0.01,
            epsilon_explore_neg: 0.01,
            affinity_max_ttft_penalty_ms: 5000.0,
            headroom_selection_strategy: "least".into(),
            composite_kv_weight: 1.0,
            composite_queue_weight: 1.0,
            composite_prefix_weight: 1.0,
            prefix_match_info_producer_name: String::new(),
            latency_prediction_info_producer_name: String::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Strategy {
    Least,
    Most,
    CompositeOnly,
}

/// The scorer.
#[derive(Debug)]
pub struct LatencyScorer {
    p: Params,
    strategy: Strategy,
    prefix: Option<PluginName>,
    latency: Option<PluginName>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let non_negative = [
        ("ttftWeight", p.ttft_weight),
        ("tpotWeight", p.tpot_weight),
        ("negHeadroomTTFTWeight", p.neg_ttft_weight),
        ("negHeadroomTPOTWeight", p.neg_tpot_weight),
        ("affinityMaxTTFTPenaltyMs", p.affinity_max_ttft_penalty_ms),
        ("compositeKVWeight", p.composite_kv_weight),
        ("compositeQueueWeight", p.composite_queue_weight),
        ("compositePrefixWeight", p.composite_prefix_weight),
    ];
    if let Some((k, _)) = non_negative.iter().find(|(_, v)| !(*v >= 0.0 && v.is_finite())) {
        return Err(BuildError::new(at(k), "must be >= 0"));
    }
    let unit = [
        ("affinityGateTauGlobal", p.affinity_gate_tau_global),
        ("affinityGateTau", p.affinity_gate_tau),
        ("epsilonExploreSticky", p.epsilon_explore_sticky),
        ("epsilonExploreNeg", p.epsilon_explore_neg),
    ];
    if let Some((k, _)) = unit.iter().find(|(_, v)| !(0.0..=1.0).contains(v)) {
        return Err(BuildError::new(at(k), "must be within [0, 1]"));
    }
    let strategy = match p.headroom_selection_strategy.as_str() {
        "least" => Strategy::Least,
        "most" => Strategy::Most,
        "composite-only" => Strategy::CompositeOnly,
        other => {
            return Err(BuildError::new(
                at("headroomSelectionStrategy"),
                format!("unknown strategy {other:?} (least, most or composite-only)"),
            ));
        }
    };
    let prefix = producer_name(p.prefix_match_info_producer_name.clone());
    let latency = producer_name(p.latency_prediction_info_producer_name.clone());
    let s = Arc::new(LatencyScorer { p, strategy, prefix, latency });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_consumer(s))
}

impl Consumer for LatencyScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::LatencyPredictionInfo(self.latency.clone()), DataKey::PrefixCacheMatchInfo(self.prefix.clone())]
    }
}

/// What the scorer knows of one candidate.
struct Row<'a> {
    index: usize,
    candidate: &'a Candidate,
    prediction: LatencyPrediction,
    prefix: f64,
}

impl LatencyScorer {
    fn prefix_scores(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let m = cx.data.prefix.get(self.prefix.as_deref()).filter(|m| m.total_blocks > 0);
        candidates
            .iter()
            .map(|c| m.map_or(0.0, |m| m.get(c.id()).match_blocks as f64 / m.total_blocks as f64))
            .collect()
    }

    /// Narrows `rows` to the sticky ones (score >= tau) unless none is sticky, the gate is
    /// off or explored past, or sticking costs more than the TTFT penalty.
    fn gate<'a>(&self, rows: Vec<Row<'a>>, tau: f64, explore: f64) -> Vec<Row<'a>> {
        if tau <= 0.0 || (explore > 0.0 && rand::random::<f64>() < explore) {
            return rows;
        }
        let best = |sticky: bool| {
            rows.iter()
                .filter(|r| (r.prefix >= tau) == sticky)
                .map(|r| r.prediction.ttft_ms)
                .fold(f64::INFINITY, f64::min)
        };
        let (sticky, other) = (best(true), best(false));
        if sticky.is_infinite() {
            return rows;
        }
        let penalty = self.p.affinity_max_ttft_penalty_ms;
        if penalty > 0.0 && other.is_finite() && sticky - other > penalty {
            return rows;
        }
        rows.into_iter().filter(|r| r.prefix >= tau).collect()
    }

    fn composite(&self, rows: &[&Candidate], prefix: &[f64]) -> Vec<f64> {
        let kv: Vec<f64> = rows.iter().map(|c| c.metrics.metrics.kv_cache_usage).collect();
        let queue: Vec<f64> = rows.iter().map(|c| c.metrics.metrics.waiting_queue_size as f64).collect();
        let w = [self.p.composite_kv_weight, self.p.composite_queue_weight, self.p.composite_prefix_weight];
        math::composite(&kv, &queue, prefix, w)
    }

    /// Scores of the chosen subset, aligned with `rows`.
    fn score_tier(&self, rows: &[Row<'_>], positive: bool) -> Vec<f64> {
        if self.strategy == Strategy::CompositeOnly {
            let cands: Vec<&Candidate> = rows.iter().map(|r| r.candidate).collect();
            let prefix: Vec<f64> = rows.iter().map(|r| r.prefix).collect();
            return self.composite(&cands, &prefix);
        }
        let preds: Vec<LatencyPrediction> = rows.iter().map(|r| r.prediction).collect();
        if positive {
            return math::positive(&preds, self.p.ttft_weight, self.p.tpot_weight, self.strategy == Strategy::Most);
        }
        let idle = |r: &Row<'_>| {
            let m = &r.candidate.metrics.metrics;
            m.running_requests == 0 && m.waiting_queue_size == 0
        };
        let any_idle = rows.iter().any(idle);
        let eligible: Vec<bool> = rows.iter().map(|r| !any_idle || idle(r)).collect();
        let best_bucket =
            rows.iter().zip(&eligible).filter(|(_, e)| **e).map(|(r, _)| math::bucket(&r.prediction)).max();
        let members: Vec<usize> = (0..rows.len())
            .filter(|i| eligible[*i] && Some(math::bucket(&rows[*i].prediction)) == best_bucket)
            .collect();
        let chosen: Vec<LatencyPrediction> = members.iter().map(|i| preds[*i]).collect();
        let scores = math::negative(&chosen, self.p.neg_ttft_weight, self.p.neg_tpot_weight);
        let mut out = vec![0.0; rows.len()];
        for (i, s) in members.into_iter().zip(scores) {
            out[i] = s;
        }
        out
    }
}

impl Scorer for LatencyScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        crate::plugins::load::score_known_first(candidates, |candidates| self.score_all(cx, candidates))
    }
}

impl LatencyScorer {
    /// Scores every candidate (the latency-based selection before the unknown-load rule).
    fn score_all(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let prefix = self.prefix_scores(cx, candidates);
        let predictions = cx.data.latency.get(self.latency.as_deref());
        let rows: Vec<Row<'_>> = candidates
            .iter()
            .enumerate()
            .filter_map(|(index, candidate)| {
                let prediction = *predictions?.per_endpoint.get(candidate.id())?;
                Some(Row { index, candidate, prediction, prefix: prefix[index] })
            })
            .collect();
        if rows.is_empty() {
            let all: Vec<&Candidate> = candidates.iter().collect();
            return self.composite(&all, &prefix);
        }
        let rows = self.gate(rows, self.p.affinity_gate_tau_global, self.p.epsilon_explore_sticky);
        let (pos, neg): (Vec<Row<'_>>, Vec<Row<'_>>) = rows.into_iter().partition(|r| r.prediction.meets_slo());
        let positive = match (pos.is_empty(), neg.is_empty()) {
            (false, false) => pick_positive(self.p.epsilon_explore_neg),
            (empty_pos, _) => !empty_pos,
        };
        let tier = self.gate(if positive { pos } else { neg }, self.p.affinity_gate_tau, 0.0);
        let mut out = vec![0.0; candidates.len()];
        for (row, s) in tier.iter().zip(self.score_tier(&tier, positive)) {
            out[row.index] = s;
        }
        out
    }
}

#[cfg(test)]
mod tests;
