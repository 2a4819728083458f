use super::*;
use crate::framework::data::MatchInfo;
use crate::framework::result::ProfileResult;
use crate::test_util::{context_for, endpoint, token_request};

fn matches() -> PrefixMatches {
    let mut m = PrefixMatches { block_size_tokens: 16, total_blocks: 4, ..Default::default() };
    m.per_endpoint.insert("a".into(), MatchInfo { match_blocks: 3, weighted_blocks: 3.0 });
    m
}

#[test]
fn uncached_tokens_follow_the_reference_formula() {
    // 70 tokens, 4 blocks of 16 (64 tokens in blocks): a holds 3 -> 1 x 16 + (70 - 64).
    assert_eq!(uncached_tokens(70, Some(&matches()), "a"), 22);
    assert_eq!(uncached_tokens(70, Some(&matches()), "b"), 4 * 16 + 6);
    assert_eq!(uncached_tokens(70, None, "a"), 70);
}

#[test]
fn output_estimate_is_capped_by_client_and_parameter() {
    let p = InFlightProducer::new("p".into(), None, Some((1.5, Some(50))));
    let request = token_request("m", &[1; 40]);
    assert_eq!(p.output_estimate(&request, 40), 50, "round(60) capped at 50");
    let p = InFlightProducer::new("p".into(), None, Some((1.5, None)));
    assert_eq!(p.output_estimate(&request, 40), 60);
    assert_eq!(InFlightProducer::new("p".into(), None, None).output_estimate(&request, 40), 0);
}

fn result(with_prefill: bool) -> SchedulingResult {
    let mut profiles = vec![("decode".into(), ProfileResult { targets: vec![endpoint("d").build()] })];
    if with_prefill {
        profiles.push(("prefill".into(), ProfileResult { targets: vec![endpoint("p").build()] }));
    }
    SchedulingResult::new("decode".into(), profiles)
}

/// Produces for a 20-token request over decode `d` and prefill `p`, then runs the
/// pre-request hook with both profile results.
fn schedule_20_tokens(p: &InFlightProducer) -> (InferenceRequest, SchedulingResult) {
    let request = token_request("m", &[7; 20]);
    let candidates = [endpoint("d").build(), endpoint("p").build()];
    let mut data = RequestData { tokens: Some(vec![7u32; 20].into()), ..Default::default() };
    p.produce(&request, &candidates, &mut data);
    let r = result(true);
    p.pre_request(&context_for(&request, &data), &r, &mut HeaderEdits::default());
    (request, r)
}

#[test]
fn pre_request_adds_and_completion_releases() {
    let p = InFlightProducer::new("inflight".into(), None, None);
    let (request, r) = schedule_20_tokens(&p);
    assert_eq!(p.load("d"), (1, 20));
    assert_eq!(p.load("p"), (1, 20));
    // The next request sees the load.
    let mut next = RequestData { tokens: Some(vec![7u32; 5].into()), ..Default::default() };
    p.produce(&request, &[endpoint("d").build(), endpoint("p").build()], &mut next);
    let loads = next.inflight.get(Some("inflight")).unwrap();
    assert_eq!(loads.per_endpoint.get("d"), Some(&(1, 20)));
    assert_eq!(loads.uncached_tokens.get("p"), Some(&5));
    p.on_response_headers(&request, &r, Some(200));
    assert_eq!(p.load("p"), (1, 20), "headers alone release nothing");
    p.on_first_response_chunk(&request, &r);
    assert_eq!(p.load("p"), (0, 0), "prefill released at the first response chunk");
    assert_eq!(p.load("d"), (1, 0), "decode tokens released early without output estimation");
    p.on_first_response_chunk(&request, &r);
    assert_eq!(p.load("d"), (1, 0), "a second first-chunk call releases nothing more");
    p.on_response_complete(&request, &r, None);
    assert_eq!(p.load("d"), (0, 0));
    // A second release never goes below zero.
    p.on_response_complete(&request, &r, None);
    assert_eq!(p.load("d"), (0, 0));
}

#[test]
fn duplicate_request_ids_release_in_order() {
    let p = InFlightProducer::new("inflight".into(), None, None);
    let request = token_request("m", &[1; 4]);
    let data = RequestData::default();
    let cx = context_for(&request, &data);
    p.pre_request(&cx, &result(false), &mut HeaderEdits::default());
    p.pre_request(&cx, &result(false), &mut HeaderEdits::default());
    assert_eq!(p.load("d").0, 2);
    p.on_response_complete(&request, &result(false), None);
    assert_eq!(p.load("d").0, 1);
    p.on_response_complete(&request, &result(false), None);
    assert_eq!(p.load("d").0, 0);
}

#[test]
fn parameters_are_strict() {
    let spec = |v| PluginSpec { name: "i".into(), type_name: TYPE.into(), parameters: v, path: "plugins[6]".into() };
    assert!(build(&spec(serde_json::json!({"outputRatio": -1.0})), &BuildContext::default()).is_err());
    assert!(build(&spec(serde_json::json!({"unknown": 1})), &BuildContext::default()).is_err());
    assert!(build(&spec(serde_json::json!({"addEstimatedOutputTokens": true, "maxEstimatedOutputTokens": 100, "syncCrossReplicaState": false})), &BuildContext::default()).is_ok());
}

#[test]
fn gauges_follow_the_ledger_and_drop_at_zero() {
    let metrics = crate::framework::build::PluginMetrics::default();
    let p = InFlightProducer::new("inflight".into(), None, None)
        .with_gauges(metrics.inflight_requests.clone(), metrics.inflight_tokens.clone());
    let (request, r) = schedule_20_tokens(&p);
    let series = |g: &prometheus::IntGaugeVec| {
        use prometheus::core::Collector;
        let mut out: Vec<(String, i64)> = g.collect()[0]
            .get_metric()
            .iter()
            .map(|m| {
                let labels: Vec<_> = m.get_label().iter().map(|l| format!("{}={}", l.name(), l.value())).collect();
                (labels.join(","), m.get_gauge().get_value() as i64)
            })
            .collect();
        out.sort();
        out
    };
    assert_eq!(
        series(&metrics.inflight_requests),
        [
            ("endpoint_name=d,producer_name=inflight".to_string(), 1),
            ("endpoint_name=p,producer_name=inflight".to_string(), 1)
        ]
    );
    assert_eq!(series(&metrics.inflight_tokens)[0].1, 20);
    p.on_first_response_chunk(&request, &r);
    p.on_response_complete(&request, &r, None);
    assert!(series(&metrics.inflight_requests).is_empty(), "series removed at zero");
    assert!(series(&metrics.inflight_tokens).is_empty());
}

#[test]
fn with_output_estimation_decode_tokens_stay_until_completion() {
    let p = InFlightProducer::new("inflight".into(), None, Some((1.5, None)));
    let (request, r) = schedule_20_tokens(&p);
    assert_eq!(p.load("d"), (1, 50), "20 input + 30 estimated output");
    p.on_first_response_chunk(&request, &r);
    assert_eq!(p.load("p"), (0, 0));
    assert_eq!(p.load("d"), (1, 50));
    p.on_response_complete(&request, &r, None);
    assert_eq!(p.load("d"), (0, 0));
}
