//! `program-aware-fairness` behaviour: strict parameters, LAS dispatch order through real
//! Flow Control queues, cold-start head-wait tie-breaking, decay, eviction and gauges.
//! Paused tokio time where time matters.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::flowcontrol::queue::Queues;
use crate::flowcontrol::settings::{BandSettings, Fairness, FlowControlSettings};
use crate::framework::data::RequestData;
use crate::request::headers::RequestHeaders;

fn policy(params: serde_json::Value) -> (Arc<ProgramAwareFairness>, prometheus::Registry) {
    let p: Params = if params.is_null() { Params::default() } else { serde_json::from_value(params).expect("params") };
    p.check().expect("valid");
    let registry = prometheus::Registry::new();
    let metrics = Arc::new(ProgramAwareMetrics::register(&registry).expect("register"));
    (Arc::new(ProgramAwareFairness::new(&p, metrics)), registry)
}

fn queues(policy: &Arc<ProgramAwareFairness>) -> Queues<&'static str> {
    let band = BandSettings { fairness: Fairness::Policy(policy.clone()), ..BandSettings::default() };
    Queues::new(FlowControlSettings { default_band: band, ..FlowControlSettings::default() })
}

fn drain(q: &mut Queues<&'static str>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for _ in 0..q.len() {
        out.extend(q.pop_next().map(|e| e.payload));
    }
    out
}

fn request(program: &str) -> InferenceRequest {
    let all = vec![("x-gateway-inference-fairness-id".to_string(), program.to_string())];
    InferenceRequest { headers: RequestHeaders { all }, ..Default::default() }
}

/// Runs a request of `program` through the pre-request and completion hooks.
fn serve(p: &ProgramAwareFairness, program: &str, prompt: u64, completion: u64) {
    let (r, d) = (request(program), RequestData::default());
    let cx = SchedulingContext { request: &r, data: &d, now: Instant::now() };
    p.pre_request(&cx, &result(), &mut HeaderEdits::default());
    let usage = Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: None };
    p.on_response_complete(&r, &result(), Some(&usage));
}

fn result() -> SchedulingResult {
    SchedulingResult { primary_profile: "p".into(), profiles: Vec::new(), destination_port: None }
}

fn gauge(registry: &prometheus::Registry, name: &str, program: Option<&str>) -> Option<f64> {
    let families = registry.gather();
    let family = families.iter().find(|f| f.name() == name)?;
    family
        .get_metric()
        .iter()
        .find(|m| program.is_none_or(|p| m.get_label().iter().any(|l| l.value() == p)))
        .map(|m| m.get_gauge().get_value())
}

#[test]
fn parameters_are_strict_with_reference_defaults() {
    let err = |v: serde_json::Value| {
        let spec = PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters: v, path: "plugins[4]".into() };
        build(&spec, &BuildContext::default()).map(|_| ()).unwrap_err().path
    };
    assert_eq!(err(serde_json::json!({"strategy": "drr"})), "plugins[4].parameters.strategy");
    assert_eq!(err(serde_json::json!({"lasDecayFactor": 1.5})), "plugins[4].parameters.lasDecayFactor");
    assert_eq!(err(serde_json::json!({"evictionSweepSeconds": 0})), "plugins[4].parameters.evictionSweepSeconds");
    assert_eq!(err(serde_json::json!({"lasWeightService": -1})), "plugins[4].parameters.lasWeightService");
    assert_eq!(err(serde_json::json!({"weightService": 1})), "plugins[4].parameters", "older spelling is unknown");
    let d = Params::default();
    assert_eq!((d.las_weight_service, d.las_weight_head_wait, d.las_half_life_seconds), (0.8, 0.2, 60.0));
    assert_eq!((d.las_decay_factor, d.eviction_ttl_seconds, d.eviction_sweep_seconds), (0.99997, 3600.0, 300.0));
    let spec =
        PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters: serde_json::Value::Null, path: "p".into() };
    let inst = build(&spec, &BuildContext::default()).expect("defaults build");
    assert!(inst.fairness.is_some() && inst.pre_request.is_some() && inst.response.is_some());
}

#[tokio::test(start_paused = true)]
async fn the_least_served_program_is_dispatched_first() {
    let (p, registry) = policy(serde_json::Value::Null);
    serve(&p, "heavy", 1000, 500);
    let mut q = queues(&p);
    for (flow, name) in [("heavy", "h1"), ("heavy", "h2"), ("light", "l1"), ("heavy", "h3"), ("light", "l2")] {
        q.push(flow, 0, 1, None, name).unwrap();
    }
    // Round robin would alternate (h1 l1 h2 l2 h3); LAS drains the unserved program first.
    assert_eq!(drain(&mut q), ["l1", "l2", "h1", "h2", "h3"]);
    assert_eq!(gauge(&registry, "llm_d_epp_program_aware_attained_service_tokens", Some("heavy")), Some(2000.0));
    assert_eq!(gauge(&registry, "llm_d_epp_program_aware_avg_wait_time_milliseconds", Some("light")), Some(0.0));
    assert_eq!(gauge(&registry, "llm_d_epp_program_aware_jains_fairness_index", None), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn on_a_cold_start_the_older_head_goes_first_and_waits_feed_the_index() {
    let (p, registry) = policy(serde_json::Value::Null);
    let mut q = queues(&p);
    q.push("b", 0, 1, None, "b1").unwrap();
    tokio::time::advance(Duration::from_millis(30)).await;
    q.push("a", 0, 1, None, "a1").unwrap();
    tokio::time::advance(Duration::from_millis(10)).await;
    // Equal (zero) service: b's head has waited 40 ms, a's 10 ms.
    assert_eq!(q.pop_next().map(|e| e.payload), Some("b1"));
    assert_eq!(q.pop_next().map(|e| e.payload), Some("a1"));
    let wait = |id| gauge(&registry, "llm_d_epp_program_aware_avg_wait_time_milliseconds", Some(id));
    assert_eq!((wait("b"), wait("a")), (Some(40.0), Some(10.0)));
    // Jain over (40, 10) = 50^2 / (2 x 1700).
    let index = gauge(&registry, "llm_d_epp_program_aware_jains_fairness_index", None).unwrap_or_default();
    assert!((index - 2500.0 / 3400.0).abs() < 1e-9, "{index}");
}

#[tokio::test(start_paused = true)]
async fn attained_service_decays_so_a_returning_program_competes_again() {
    let (p, _) = policy(serde_json::json!({"lasHalfLifeSeconds": 10}));
    serve(&p, "a", 100, 50);
    serve(&p, "b", 10, 0);
    assert_eq!(p.attained_service("a"), 200.0);
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!((p.attained_service("a") - 50.0).abs() < 1e-6, "two half-lives");
    let (f, _) = policy(serde_json::json!({"lasHalfLifeSeconds": 0, "lasDecayFactor": 0.5}));
    serve(&f, "a", 8, 0);
    tokio::time::advance(Duration::from_secs(3)).await;
    assert!((f.attained_service("a") - 1.0).abs() < 1e-9, "per-second factor");
}

#[tokio::test(start_paused = true)]
async fn idle_programs_are_evicted_but_busy_ones_stay() {
    let (p, registry) = policy(serde_json::json!({"evictionTtlSeconds": 10, "evictionSweepSeconds": 1}));
    serve(&p, "done", 5, 5);
    // "busy" has a request in flight (pre-request without completion).
    let (r, d) = (request("busy"), RequestData::default());
    let cx = SchedulingContext { request: &r, data: &d, now: Instant::now() };
    p.pre_request(&cx, &result(), &mut HeaderEdits::default());
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(p.programs(), 2, "within the TTL");
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(p.programs(), 1, "done evicted, busy kept");
    assert_eq!(p.attained_service("done"), 0.0);
    assert_eq!(gauge(&registry, "llm_d_epp_program_aware_attained_service_tokens", Some("done")), None);
    p.on_response_complete(&r, &result(), None);
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(p.programs(), 0);
}
