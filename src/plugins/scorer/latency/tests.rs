//! `latency-scorer` behaviour over hand-made predictions.

use std::sync::Arc;

use super::*;
use crate::framework::data::ByProducer;
use crate::framework::data::{LatencyPredictions, MatchInfo, PrefixMatches, RequestData};
use crate::test_util::{context_for, endpoint};

fn scorer(params: serde_json::Value) -> LatencyScorer {
    let spec = PluginSpec { name: "s".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() };
    let inst = build(&spec, &BuildContext::default()).expect("builds");
    let _ = inst.scorer.expect("scorer role");
    let p: Params = decode_params(&spec).expect("params");
    let strategy = match p.headroom_selection_strategy.as_str() {
        "most" => Strategy::Most,
        "composite-only" => Strategy::CompositeOnly,
        _ => Strategy::Least,
    };
    LatencyScorer { p, strategy, prefix: None, latency: None }
}

/// No exploration, gates off unless asked.
fn quiet(extra: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({"epsilonExploreNeg": 0, "epsilonExploreSticky": 0, "affinityGateTauGlobal": 0, "affinityGateTau": 0});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// Predictions (ttft, tpot, ttft headroom, tpot headroom) per endpoint name.
fn data(rows: &[(&str, f64, f64, f64, f64)], prefix: &[(&str, usize)]) -> RequestData {
    let mut l = LatencyPredictions::default();
    for (n, ttft_ms, tpot_ms, ttft_headroom_ms, tpot_headroom_ms) in rows {
        l.per_endpoint.insert(
            (*n).into(),
            LatencyPrediction {
                ttft_ms: *ttft_ms,
                tpot_ms: *tpot_ms,
                ttft_headroom_ms: *ttft_headroom_ms,
                tpot_headroom_ms: *tpot_headroom_ms,
            },
        );
    }
    let mut m = PrefixMatches { block_size_tokens: 16, total_blocks: 10, ..Default::default() };
    for (n, b) in prefix {
        m.per_endpoint.insert((*n).into(), MatchInfo { match_blocks: *b, weighted_blocks: *b as f64 });
    }
    RequestData {
        latency: ByProducer::only("lp", Arc::new(l)),
        prefix: ByProducer::only("p", Arc::new(m)),
        ..Default::default()
    }
}

fn scores(s: &LatencyScorer, d: &RequestData, cands: &[Candidate]) -> Vec<f64> {
    let request = Default::default();
    s.score(&context_for(&request, d), cands)
}

fn abc() -> Vec<Candidate> {
    vec![endpoint("a").running(1).build(), endpoint("b").running(1).build(), endpoint("c").running(1).build()]
}

#[test]
fn most_prefers_the_most_headroom_least_packs() {
    // a: 120 ms headroom, b: 50, c: 30 (TPOT headroom equal).
    let d = data(&[("a", 80.0, 10.0, 120.0, 5.0), ("b", 150.0, 10.0, 50.0, 5.0), ("c", 170.0, 10.0, 30.0, 5.0)], &[]);
    let most = scores(&scorer(quiet(serde_json::json!({"headroomSelectionStrategy": "most"}))), &d, &abc());
    assert!(most[0] > most[1] && most[1] > most[2], "{most:?}");
    let least = scores(&scorer(quiet(serde_json::json!({}))), &d, &abc());
    assert!(least[2] > least[1] && least[1] > least[0], "{least:?}");
}

#[test]
fn positive_tier_beats_negative_unless_exploring() {
    let d = data(&[("a", 80.0, 10.0, 20.0, 5.0), ("b", 300.0, 10.0, -200.0, 5.0)], &[]);
    let cands = &abc()[..2];
    assert_eq!(scores(&scorer(quiet(serde_json::json!({}))), &d, cands), [1.0, 0.0]);
    assert_eq!(scores(&scorer(quiet(serde_json::json!({"epsilonExploreNeg": 1}))), &d, cands), [0.0, 1.0]);
}

#[test]
fn without_slos_the_lowest_latency_wins_and_idle_first() {
    // SLO 0: every headroom is minus the prediction.
    let d = data(
        &[("a", 500.0, 20.0, -500.0, -20.0), ("b", 100.0, 20.0, -100.0, -20.0), ("c", 900.0, 20.0, -900.0, -20.0)],
        &[],
    );
    let s = scores(&scorer(quiet(serde_json::json!({}))), &d, &abc());
    assert!(s[1] > s[0] && s[0] > s[2], "{s:?}");
    let idle_c = vec![endpoint("a").running(1).build(), endpoint("b").running(1).build(), endpoint("c").build()];
    assert_eq!(scores(&scorer(quiet(serde_json::json!({}))), &d, &idle_c), [0.0, 0.0, 1.0], "idle endpoint first");
}

#[test]
fn only_tpot_misses_beat_ttft_misses() {
    let d = data(&[("a", 0.0, 0.0, -1.0, 5.0), ("b", 0.0, 0.0, 5.0, -50.0)], &[]);
    assert_eq!(scores(&scorer(quiet(serde_json::json!({}))), &d, &abc()[..2]), [0.0, 1.0]);
}

#[test]
fn affinity_gate_sticks_unless_too_slow() {
    // a holds the whole prefix; b is faster.
    let fast_b = data(&[("a", 300.0, 10.0, 100.0, 5.0), ("b", 100.0, 10.0, 300.0, 5.0)], &[("a", 10)]);
    let gated = serde_json::json!({"affinityGateTauGlobal": 0.99, "headroomSelectionStrategy": "most"});
    assert_eq!(scores(&scorer(quiet(gated.clone())), &fast_b, &abc()[..2]), [1.0, 0.0]);
    let mut strict = gated;
    strict["affinityMaxTTFTPenaltyMs"] = serde_json::json!(100);
    assert_eq!(scores(&scorer(quiet(strict)), &fast_b, &abc()[..2]), [0.0, 1.0], "200 ms slower breaks stickiness");
}

#[test]
fn composite_fallback_and_contract() {
    let cands = vec![endpoint("a").kv_usage(0.9).waiting(5).build(), endpoint("b").kv_usage(0.1).build()];
    let s = scores(&scorer(quiet(serde_json::json!({}))), &RequestData::default(), &cands);
    assert!(s[1] > s[0], "{s:?}");
    crate::plugins::scorer::contract::check(&scorer(serde_json::json!({})), &RequestData::default());
    crate::plugins::scorer::contract::check(
        &scorer(serde_json::json!({})),
        &data(&[("e1", 5.0, 1.0, -5.0, -1.0)], &[]),
    );
}

#[test]
fn parameter_ranges() {
    let spec = |v| PluginSpec { name: "s".into(), type_name: TYPE.into(), parameters: v, path: "plugins[2]".into() };
    let err = |v| build(&spec(v), &BuildContext::default()).unwrap_err().path;
    assert_eq!(err(serde_json::json!({"ttftWeight": -1})), "plugins[2].parameters.ttftWeight");
    assert_eq!(err(serde_json::json!({"epsilonExploreNeg": 2})), "plugins[2].parameters.epsilonExploreNeg");
    assert_eq!(
        err(serde_json::json!({"headroomSelectionStrategy": "x"})),
        "plugins[2].parameters.headroomSelectionStrategy"
    );
}
