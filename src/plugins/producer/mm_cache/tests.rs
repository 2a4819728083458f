//! Producer tests: items recorded on the chosen endpoint, pins and pending items, LRU
//! eviction, the encode profile, departed endpoints, parameters and metrics.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::endpoints::model::Candidate;
use crate::framework::data::ByProducer;
use crate::framework::plugin::Scorer;
use crate::framework::result::ProfileResult;
use crate::plugins::scorer::mm_cache::MmCacheScorer;
use crate::request::openai::{ApiKind, parse_body};
use crate::test_util::endpoint;

fn image_request(id: &str, urls: &[&str]) -> InferenceRequest {
    let parts: Vec<_> =
        urls.iter().map(|u| serde_json::json!({"type": "image_url", "image_url": {"url": u}})).collect();
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": parts}]});
    let bytes = serde_json::to_vec(&body).unwrap();
    InferenceRequest {
        request_id: id.into(),
        body: Some(parse_body(ApiKind::ChatCompletions, &bytes).unwrap()),
        ..Default::default()
    }
}

fn producer(capacity: u64, sized: bool) -> MmCacheProducer {
    MmCacheProducer::new("mm".into(), capacity, sized, EndpointStore::new(), &PluginMetrics::default())
}

fn result(profiles: &[(&str, &Candidate)], primary: &str) -> SchedulingResult {
    let profiles =
        profiles.iter().map(|(n, c)| (Arc::<str>::from(*n), ProfileResult { targets: vec![(*c).clone()] })).collect();
    SchedulingResult::new(primary.into(), profiles)
}

/// Runs produce + pre-request with `target` as the primary (decode) choice.
fn route(p: &MmCacheProducer, r: &InferenceRequest, candidates: &[Candidate], target: &Candidate) -> RequestData {
    route_result(p, r, candidates, &result(&[("decode", target)], "decode"), Instant::now())
}

/// `route` for a request whose tokenize step reported `items`.
fn route_items(
    p: &MmCacheProducer,
    r: &InferenceRequest,
    items: &[MediaItem],
    candidates: &[Candidate],
    target: &Candidate,
) {
    let mut data = phase_one(items);
    p.produce(r, candidates, &mut data);
    let cx = SchedulingContext { request: r, data: &data, now: Instant::now() };
    p.pre_request(&cx, &result(&[("decode", target)], "decode"), &mut HeaderEdits::default());
}

/// Data after phase 1 with the tokenize step's `items`.
fn phase_one(items: &[MediaItem]) -> RequestData {
    RequestData {
        mm_items: Some(items.into()),
        encoder_cache: ByProducer::with_default(Some("mm".into())),
        ..Default::default()
    }
}

fn route_result(
    p: &MmCacheProducer,
    r: &InferenceRequest,
    candidates: &[Candidate],
    result: &SchedulingResult,
    now: Instant,
) -> RequestData {
    let mut data = RequestData { encoder_cache: ByProducer::with_default(Some("mm".into())), ..Default::default() };
    p.produce(r, candidates, &mut data);
    let cx = SchedulingContext { request: r, data: &data, now };
    p.pre_request(&cx, result, &mut HeaderEdits::default());
    data
}

fn scores(data: &RequestData, r: &InferenceRequest, candidates: &[Candidate]) -> Vec<f64> {
    let cx = SchedulingContext { request: r, data, now: Instant::now() };
    MmCacheScorer::new(None).score(&cx, candidates)
}

#[test]
fn items_are_recorded_on_the_chosen_endpoint() {
    let p = producer(100, false);
    let (a, b) = (endpoint("a").build(), endpoint("b").build());
    let cands = [a.clone(), b.clone()];
    let r1 = image_request("r1", &["http://i/1.png", "http://i/2.png"]);
    let first = route(&p, &r1, &cands, &b);
    assert_eq!(scores(&first, &r1, &cands), vec![0.0, 0.0], "nothing known yet");
    assert_eq!(p.tracked("b"), 2);
    assert_eq!(p.open_placements(), 1);
    p.on_first_response_chunk(&r1, &result(&[("decode", &b)], "decode"));
    assert_eq!(p.open_placements(), 0);

    let r2 = image_request("r2", &["http://i/2.png", "http://i/3.png"]);
    let second = route(&p, &r2, &cands, &b);
    assert_eq!(scores(&second, &r2, &cands), vec![0.0, 0.5], "one of two images on b");
    let m = second.encoder_cache.get(None).expect("match info");
    assert_eq!((m.items.len(), m.total_weight, m.matched("b")), (2, 2, 1));

    let text = crate::test_util::chat_request("m", &["no images"]);
    let mut data = RequestData::default();
    p.produce(&text, &cands, &mut data);
    assert!(data.encoder_cache.is_empty(), "text-only requests produce nothing");
}

#[test]
fn least_recently_used_items_are_evicted() {
    let p = producer(2, false);
    let a = endpoint("a").build();
    let cands = [a.clone()];
    for (i, url) in ["http://i/1.png", "http://i/2.png", "http://i/1.png", "http://i/3.png"].iter().enumerate() {
        let r = image_request(&format!("r{i}"), &[url]);
        route(&p, &r, &cands, &a);
        p.on_first_response_chunk(&r, &result(&[("decode", &a)], "decode"));
        p.on_response_complete(&r, &result(&[("decode", &a)], "decode"), None);
    }
    assert_eq!(p.tracked("a"), 2);
    let probe = |url: &str| {
        let r = image_request("probe", &[url]);
        let mut data = RequestData { encoder_cache: ByProducer::with_default(Some("mm".into())), ..Default::default() };
        p.produce(&r, &cands, &mut data);
        scores(&data, &r, &cands)[0]
    };
    assert_eq!(probe("http://i/1.png"), 1.0, "1 was used again before 3 arrived");
    assert_eq!(probe("http://i/3.png"), 1.0);
    assert_eq!(probe("http://i/2.png"), 0.0, "2 was the least recently used");
}

#[test]
fn pinned_items_survive_and_pending_items_commit_at_the_first_chunk() {
    let p = producer(1, false);
    let a = endpoint("a").build();
    let cands = [a.clone()];
    let res = result(&[("decode", &a)], "decode");
    let r1 = image_request("r1", &["http://i/1.png"]);
    let r2 = image_request("r2", &["http://i/2.png"]);
    route(&p, &r1, &cands, &a);
    route(&p, &r2, &cands, &a);
    assert_eq!(p.tracked("a"), 1, "2 did not fit next to the pinned 1");
    p.on_first_response_chunk(&r1, &res);
    p.on_first_response_chunk(&r2, &res);
    let probe = image_request("probe", &["http://i/2.png"]);
    let mut data = RequestData { encoder_cache: ByProducer::with_default(Some("mm".into())), ..Default::default() };
    p.produce(&probe, &cands, &mut data);
    assert_eq!(scores(&data, &probe, &cands), vec![1.0], "2 recorded once its response started");

    // A request that ends before any chunk records its pending items nowhere.
    let r3 = image_request("r3", &["http://i/3.png"]);
    let r4 = image_request("r4", &["http://i/4.png"]);
    route(&p, &r3, &cands, &a);
    route(&p, &r4, &cands, &a);
    p.on_response_complete(&r4, &res, None);
    p.on_first_response_chunk(&r3, &res);
    let probe = image_request("probe", &["http://i/4.png"]);
    let mut data = RequestData { encoder_cache: ByProducer::with_default(Some("mm".into())), ..Default::default() };
    p.produce(&probe, &cands, &mut data);
    assert_eq!(scores(&data, &probe, &cands), vec![0.0]);
    assert_eq!(p.open_placements(), 0);
}

#[test]
fn encode_profile_targets_hold_the_embeddings() {
    let p = producer(10, false);
    let (d, e) = (endpoint("d").build(), endpoint("e").build());
    let r = image_request("r", &["http://i/1.png"]);
    let res = result(&[("decode", &d), (ENCODE_PROFILE, &e)], "decode");
    route_result(&p, &r, &[d.clone(), e.clone()], &res, Instant::now());
    assert_eq!((p.tracked("e"), p.tracked("d")), (1, 0));
}

#[test]
fn embeddings_mode_sizes_items_by_placeholder_length() {
    let p = producer(100, true);
    let a = endpoint("a").build();
    let only_a = std::slice::from_ref(&a);
    let res = result(&[("decode", &a)], "decode");
    let r = image_request("r", &[]);
    let big = MediaItem { key: 1, modality: Modality::Image, size: 80 };
    let small = MediaItem { key: 2, modality: Modality::Image, size: 30 };
    route_items(&p, &r, &[big], only_a, &a);
    p.on_first_response_chunk(&r, &res);
    route_items(&p, &r, &[small], only_a, &a);
    p.on_first_response_chunk(&r, &res);
    assert_eq!(p.tracked("a"), 1, "80 + 30 > 100: the older item was evicted");
    let mut data = phase_one(&[big, small]);
    p.produce(&r, only_a, &mut data);
    assert_eq!(scores(&data, &r, only_a), vec![30.0 / 110.0]);
}

#[test]
fn stale_placements_are_released() {
    let p = producer(1, false);
    let a = endpoint("a").build();
    let only_a = std::slice::from_ref(&a);
    let start = Instant::now();
    let res = result(&[("decode", &a)], "decode");
    route_result(&p, &image_request("lost", &["http://i/1.png"]), only_a, &res, start);
    let later = start + PLACEMENT_TTL + Duration::from_secs(1);
    route_result(&p, &image_request("next", &["http://i/2.png"]), only_a, &res, later);
    assert_eq!(p.open_placements(), 1, "the lost request's pins were released by the sweep");
    // 1 was unpinned by the sweep after 2 had been placed: 2 is pending, not tracked yet.
    assert_eq!(p.tracked("a"), 1);
}

#[test]
fn departed_endpoints_lose_their_model_and_series() {
    let metrics = PluginMetrics::default();
    let store = EndpointStore::new();
    store.replace(vec![endpoint("a").endpoint(), endpoint("b").endpoint()]);
    let p = MmCacheProducer::new("mm".into(), 10, false, store.clone(), &metrics);
    let (a, b) = (endpoint("a").build(), endpoint("b").build());
    let r = image_request("r", &["http://i/1.png"]);
    route(&p, &r, &[a.clone(), b.clone()], &a);
    route(&p, &image_request("r2", &["http://i/1.png"]), &[a.clone(), b.clone()], &a);
    let hits = || metrics.encoder_cache_hits.with_label_values(&[TYPE, "mm", "a", "image"]).get();
    assert_eq!(hits(), 1);
    store.replace(vec![endpoint("b").endpoint()]);
    let mut data = RequestData::default();
    p.produce(&r, &[b], &mut data);
    assert_eq!(p.tracked("a"), 0);
    assert_eq!(hits(), 0, "the departed endpoint's series was removed (and re-created empty here)");
    assert_eq!(metrics.encoder_cache_queries.with_label_values(&[TYPE, "mm", "image"]).get(), 3);
}

fn spec(params: serde_json::Value) -> PluginSpec {
    PluginSpec { name: "mm".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() }
}

#[test]
fn parameters() {
    let cx = BuildContext::default();
    let err = build(&spec(serde_json::json!({"cacheSizeInMBPerServer": 8, "cacheSizeInEmbeddingsPerServer": 9})), &cx)
        .expect_err("both set");
    assert_eq!(err.path, "plugins[0].parameters");
    let err = build(&spec(serde_json::json!({"cacheSizeInMbPerServer": 8})), &cx).expect_err("misspelt");
    assert_eq!(err.path, "plugins[0].parameters");
    let err = build(&spec(serde_json::json!({"cacheSize": 8})), &cx).expect_err("old parameter");
    assert_eq!(err.path, "plugins[0].parameters");
    let inst = build(&spec(serde_json::json!({"cacheSizeInMBPerServer": 4, "cacheSizeInEmbeddingsPerServer": 0})), &cx)
        .expect("4 MiB = 2 items");
    assert!(inst.producer.is_some() && inst.pre_request.is_some() && inst.response.is_some());
    assert!(inst.encoder_cache_sizer.is_some(), "sizes for the latency step");
    let produces = inst.producer.as_ref().map(|p| p.produces()).unwrap_or_default();
    assert_eq!(produces, vec![DataKey::EncoderCacheMatchInfo(Some("mm".into()))]);
    build(&spec(serde_json::json!({"cacheSizeInMBPerServer": -1})), &cx).expect("<= 0 = default");
    build(&spec(serde_json::Value::Null), &cx).expect("defaults");
}

#[test]
fn encoder_cache_sizes_for_the_latency_predictor() {
    let metrics = PluginMetrics::default();
    let p = MmCacheProducer::new("mm".into(), 100, true, EndpointStore::new(), &metrics);
    let (a, b) = (endpoint("a").build(), endpoint("b").build());
    let r = image_request("r", &[]);
    let first = MediaItem { key: 1, modality: Modality::Image, size: 40 };
    route_items(&p, &r, &[first], &[a.clone(), b.clone()], &a);
    let both = phase_one(&[first, MediaItem { key: 2, modality: Modality::Audio, size: 10 }]);
    let queries_before = metrics.encoder_cache_queries.with_label_values(&[TYPE, "mm", "image"]).get();
    let sizes = p.encoder_cache_sizes(&r, &both, &[a, b]);
    assert_eq!(sizes.input, 50);
    assert_eq!(sizes.per_endpoint.get("a").map(|s| (s.input, s.matched)), Some((50, 40)));
    assert!(!sizes.per_endpoint.contains_key("b"));
    let queries_after = metrics.encoder_cache_queries.with_label_values(&[TYPE, "mm", "image"]).get();
    assert_eq!(queries_before, queries_after, "a read-only lookup records no metrics");
    let text = crate::test_util::chat_request("m", &["hi"]);
    let none = p.encoder_cache_sizes(&text, &RequestData::default(), &[endpoint("a").build()]);
    assert_eq!((none.input, none.per_endpoint.len()), (0, 0));
}
