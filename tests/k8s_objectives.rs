//! InferenceObjective and InferenceModelRewrite watches against the mock API server, through
//! real ext_proc streams: an epp started with `--pool-name` picks up an objective created
//! after start (its negative priority sheds requests on a saturated pool, winning over the
//! `--objective` flag) and a model rewrite (the upstream body names the target, the response
//! names the client's model again), ignores objects of another pool, and follows their
//! deletion. GIE's legacy group is used when llm-d's is not installed.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::kube::{MockKube, model_rewrite, objective, pod, pool, pool_settings, serve_objective_crds};
use common::*;
use epp::k8s::KubeHandle;
use epp::k8s::metrics::K8sMetrics;
use epp::k8s::objectives::{ObjectKind, PoolIdentity, follow};
use epp::k8s::watch::WatchOptions;
use epp::objectives::ObjectiveStore;
use epp::proto::ext_proc::ProcessingResponse;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const LLMD: &str = "llm-d.ai";
const OBJECTIVES: &str = "/apis/llm-d.ai/v1alpha2/namespaces/ns/inferenceobjectives";
const REWRITES: &str = "/apis/llm-d.ai/v1alpha2/namespaces/ns/inferencemodelrewrites";

/// Polls `/metrics` (bounded by [`WAIT`]) until it has `line`.
async fn wait_metric(addr: std::net::SocketAddr, line: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = scrape(addr).await;
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no `{line}` within {WAIT:?}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a full-duplex chat request for `model` with `headers`; returns the first two replies
/// (headers, body) or the immediate response.
async fn ask(ex: &mut Exchange, model: &str, headers: &[(&str, &str)]) -> Vec<ProcessingResponse> {
    ex.send(request_headers("/v1/chat/completions", headers, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat(model, "hi", false), true)).await;
    let first = ex.next().await;
    if immediate(&first).is_some() {
        return vec![first];
    }
    vec![first, ex.next().await]
}

async fn ask_objective(app: &epp::app::App, objective: &str) -> ProcessingResponse {
    let mut client = epp::proto::ext_proc::external_processor_client::ExternalProcessorClient::connect(format!(
        "http://{}",
        app.grpc_addr
    ))
    .await
    .unwrap();
    let mut ex = Exchange::open(&mut client).await;
    ask(&mut ex, "m", &[("x-gateway-inference-objective", objective)]).await.remove(0)
}

#[tokio::test]
async fn objectives_and_rewrites_created_after_start_apply_to_requests_until_deleted() {
    // Saturated (9 waiting, KV 95 %): sheddable requests get 429.
    let fake = FakeVllm::start([127, 0, 0, 71], 9, 4, 0.95).await;
    let mock = MockKube::start().await;
    serve_objective_crds(&mock, LLMD);
    mock.apply(POOLS, pool("vllm-pool", json!({"app": "vllm"}), &[fake.addr.port()]));
    mock.apply(PODS, pod("vllm-0", json!({"app": "vllm"}), Some("127.0.0.71"), true));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mock.kubeconfig(dir.path());
    let mut settings = epp::app::Settings::loopback();
    settings.kubernetes = Some(pool_settings(&kubeconfig));
    settings.refresh_metrics_interval = Duration::from_millis(10);
    // The flag says "batch" is critical; the object created below says sheddable and wins.
    settings.objectives = HashMap::from([("batch".to_string(), 5)]);
    let app = epp::app::App::start(settings).await.expect("epp starts");
    let mut changes = app.store.subscribe_metrics();
    let deadline = tokio::time::Instant::now() + WAIT;
    while app.store.snapshot().get("vllm-0-rank-0").is_none_or(|e| e.metrics.load().metrics.waiting_queue_size != 9) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(matches!(tokio::time::timeout(left, changes.changed()).await, Ok(Ok(()))), "pod not scraped");
    }
    let routed = |r: &ProcessingResponse| set_header(r, "x-gateway-destination-endpoint").is_some();
    assert!(routed(&ask_objective(&app, "batch").await), "flag priority 5: routed");

    // Another pool's objective first, then ours: once ours is held, the other was skipped.
    mock.apply(OBJECTIVES, objective(LLMD, "foreign", "other-pool", -1));
    mock.apply(OBJECTIVES, objective(LLMD, "batch", "vllm-pool", -1));
    wait_metric(app.metrics_addr, r#"epp_k8s_objects{resource="inferenceobjectives"} 1"#).await;
    let shed = ask_objective(&app, "batch").await;
    assert_eq!(immediate(&shed).map(|(status, _)| status), Some(429), "object priority -1 wins over the flag");
    assert!(routed(&ask_objective(&app, "foreign").await), "another pool's objective is ignored");

    mock.apply(
        REWRITES,
        model_rewrite(
            LLMD,
            "alias-to-real",
            "vllm-pool",
            "2026-01-01T00:00:00Z",
            json!([{"matches": [{"model": {"type": "Exact", "value": "alias"}}],
                    "targets": [{"modelRewrite": "real", "weight": 100}]}]),
        ),
    );
    wait_metric(app.metrics_addr, r#"epp_k8s_objects{resource="inferencemodelrewrites"} 1"#).await;
    let mut client = epp::proto::ext_proc::external_processor_client::ExternalProcessorClient::connect(format!(
        "http://{}",
        app.grpc_addr
    ))
    .await
    .unwrap();
    let mut ex = Exchange::open(&mut client).await;
    let replies = ask(&mut ex, "alias", &[]).await;
    let (upstream, _) = streamed(&replies[1]).expect("body echoed upstream");
    let upstream: serde_json::Value = serde_json::from_slice(&upstream).unwrap();
    assert_eq!(upstream["model"], "real", "the body names the rewrite target");
    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    ex.send(response_body(br#"{"id":"1","model":"real","choices":[]}"#, true)).await;
    let (body, _) = streamed(&ex.next().await).unwrap();
    assert_eq!(body, br#"{"id":"1","model":"alias","choices":[]}"#.to_vec(), "the client sees its model name");
    let text = scrape(app.metrics_addr).await;
    assert!(
        text.contains(r#"inference_extension_model_rewrite_decisions_total{model_name="alias",model_rewrite_name="alias-to-real",target_model="real"} 1"#),
        "{text}"
    );

    drop(ex);
    mock.delete(OBJECTIVES, "batch");
    mock.delete(REWRITES, "alias-to-real");
    wait_metric(app.metrics_addr, r#"epp_k8s_objects{resource="inferenceobjectives"} 0"#).await;
    wait_metric(app.metrics_addr, r#"epp_k8s_objects{resource="inferencemodelrewrites"} 0"#).await;
    assert!(routed(&ask_objective(&app, "batch").await), "deleted: the flag applies again");
    let mut ex = Exchange::open(&mut client).await;
    let replies = ask(&mut ex, "alias", &[]).await;
    let (upstream, _) = streamed(&replies[1]).expect("body echoed upstream");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&upstream).unwrap()["model"], "alias");
    drop((ex, client));
    tokio::time::timeout(WAIT, app.shutdown()).await.expect("epp stops");
}

#[tokio::test]
async fn legacy_gie_group_is_watched_when_llm_d_group_is_absent() {
    let legacy = "inference.networking.x-k8s.io";
    let mock = MockKube::start().await;
    serve_objective_crds(&mock, legacy);
    let path = format!("/apis/{legacy}/v1alpha2/namespaces/ns/inferenceobjectives");
    mock.apply(&path, objective(legacy, "chat", "vllm-pool", 7));
    let kube = KubeHandle {
        client: epp::k8s::client::plain_http(&format!("http://{}", mock.addr)).unwrap(),
        namespace: "ns".into(),
        metrics: K8sMetrics::unregistered(),
        options: WatchOptions {
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(50),
            timeout_seconds: 60,
        },
    };
    let store = ObjectiveStore::default();
    let pool = PoolIdentity { name: "vllm-pool".into(), group: "inference.networking.k8s.io".into() };
    let cancel = CancellationToken::new();
    tokio::spawn(follow(kube, pool, store.clone(), ObjectKind::Objective, cancel.clone()));
    mock.wait_until("objectives listed", |m| m.calls(&path).0 >= 1).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while store.priority("chat").is_none() {
        assert!(tokio::time::Instant::now() < deadline, "legacy objective not picked up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.priority("chat"), Some(7));
    cancel.cancel();
}
