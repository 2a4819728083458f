//! The latency-predictor stack end to end: a real epp on loopback with a fake prediction and
//! training sidecar (a hyper server answering `/predict/bulk/strict` with chosen
//! predictions and recording `/add_training_data_bulk` uploads). Predictions steer routing;
//! a dead predictor still routes and is counted; configs with the stack load.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Fake sidecar: predicted TTFT = `ttft_by_waiting[num_request_waiting]` ms (TPOT 10 ms);
/// training uploads are forwarded on the returned channel.
async fn fake_sidecar(ttft_by_waiting: Vec<f64>) -> (SocketAddr, mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (tx, table) = (tx.clone(), ttft_by_waiting.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (tx, table) = (tx.clone(), table.clone());
                    async move {
                        let path = req.uri().path().to_string();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let answer = if path == "/predict/bulk/strict" {
                            let preds: Vec<Value> = v["requests"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|r| {
                                    let w = r["num_request_waiting"].as_u64().unwrap_or(0) as usize;
                                    json!({"ttft_ms": table.get(w).copied().unwrap_or(1e6), "tpot_ms": 10.0})
                                })
                                .collect();
                            json!({"predictions": preds})
                        } else {
                            let _ = tx.send(v);
                            json!({"message": "accepted"})
                        };
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(answer.to_string()))))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (addr, rx)
}

fn config(predictor: SocketAddr, training: SocketAddr, timeout: &str) -> String {
    format!(
        r#"apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {{predictionServerUrls: ["http://{predictor}"], trainingServerUrl: "http://{training}", timeout: {timeout}}}
- type: slo-headroom-tier-filter
  parameters: {{epsilonExploreNeg: 0}}
- type: latency-scorer
  parameters: {{headroomSelectionStrategy: most, epsilonExploreNeg: 0, epsilonExploreSticky: 0, affinityGateTauGlobal: 0, affinityGateTau: 0}}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
"#
    )
}

fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

async fn two_pods(cfg: impl FnOnce(SocketAddr) -> String) -> (FakeVllm, FakeVllm, TestEpp) {
    // a has the shorter queue, but the predictor says b answers faster.
    let a = FakeVllm::start([127, 0, 0, 2], 0, 1, 0.1).await;
    let b = FakeVllm::start([127, 0, 0, 3], 1, 1, 0.1).await;
    let eps = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[])]);
    let epp = TestEpp::start(&eps, Some(&cfg(a.addr)), |_| {}).await;
    epp.wait_waiting(&[("a", 0), ("b", 1)]).await;
    (a, b, epp)
}

#[tokio::test]
async fn predictions_route_to_the_headroom_and_training_samples_follow() {
    let (sidecar, mut uploads) = fake_sidecar(vec![900.0, 50.0]).await;
    let (_a, b, epp) = two_pods(|_| config(sidecar, sidecar, "2s")).await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let slo = [("x-slo-ttft-ms", "200"), ("x-slo-tpot-ms", "50")];
    ex.send(request_headers("/v1/chat/completions", &slo, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hello", true), true)).await;
    let replies = ex.take(2).await;
    let dest = replies.iter().find_map(|r| set_header(r, "x-gateway-destination-endpoint"));
    assert_eq!(dest, Some(b.addr.to_string()), "b is predicted 50 ms (a 900 ms > SLO)");

    ex.send(response_headers("200", "text/event-stream")).await;
    ex.next().await;
    ex.send(response_body(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", false)).await;
    ex.next().await;
    let last = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
    ex.send(response_body(last, true)).await;
    ex.next().await;
    let sample = tokio::time::timeout(std::time::Duration::from_secs(10), uploads.recv())
        .await
        .expect("training sample uploaded")
        .expect("channel open");
    let entry = &sample["entries"][0];
    assert_eq!(entry["num_request_waiting"], 1, "features of the chosen endpoint: {sample}");
    assert_eq!(entry["num_tokens_generated"], 3);
    assert!(entry["actual_ttft_ms"].as_f64().is_some_and(|t| t >= 0.0), "{sample}");
    assert!(entry["actual_tpot_ms"].as_f64().is_some_and(|t| t >= 0.0), "{sample}");

    let metrics = scrape(epp.app.metrics_addr).await;
    let labels = r#"{model_name="m",target_model_name="m"}"#;
    for name in [
        "inference_objective_request_predicted_ttft_seconds_count",
        "llm_d_epp_request_predicted_ttft_seconds_count",
        "inference_objective_request_predicted_tpot_seconds_count",
        "inference_objective_request_ttft_prediction_duration_seconds_count",
        "llm_d_epp_request_tpot_prediction_duration_seconds_count",
    ] {
        assert_eq!(value(&metrics, &format!("{name}{labels}")), Some(1.0), "{name}\n{metrics}");
    }
    assert_eq!(value(&metrics, &format!("inference_objective_request_predicted_ttft_seconds_sum{labels}")), Some(0.05));
}

#[tokio::test]
async fn dead_predictor_still_routes_and_is_counted() {
    // Accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = silent.local_addr().expect("addr");
    let (_a, _b, epp) = two_pods(|_| config(dead, dead, "100ms")).await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((BUFFERED, NONE)))).await;
    assert!(is_request_headers(&ex.next().await));
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    assert!(set_header(&ex.next().await, "x-gateway-destination-endpoint").is_some(), "routed without predictions");
    let metrics = scrape(epp.app.metrics_addr).await;
    assert_eq!(value(&metrics, r#"epp_latency_prediction_errors_total{reason="timeout"}"#), Some(1.0), "{metrics}");
    drop(silent);
}

fn load(text: &str) -> Result<epp::config::LoadedConfig, epp::config::ConfigErrors> {
    epp::app::load_config(
        Some(text),
        &epp::framework::build::BuildContext::default(),
        epp::scheduling::metrics::SchedulerMetrics::detached(),
    )
}

#[test]
fn configs_with_the_stack_load_under_both_api_versions() {
    for api in ["inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1"] {
        let text = format!(
            "apiVersion: {api}
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  name: lp
  parameters: {{predictionServerUrls: [\"http://127.0.0.1:8001\"], samplingMean: 1000, contextTTL: 5m}}
- type: prefix-cache-affinity-filter
  parameters: {{ttftSource: latencyPredictor, latencyPredictionInfoProducerName: lp}}
- type: slo-headroom-tier-filter
  parameters: {{epsilonExploreNeg: 0.05, latencyPredictionInfoProducerName: lp}}
- type: latency-scorer
  parameters: {{latencyPredictionInfoProducerName: lp}}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
"
        );
        let loaded = load(&text).unwrap_or_else(|e| panic!("{api}: {e}"));
        let producers: Vec<String> = loaded.scheduler.producers().iter().map(|p| p.name.to_string()).collect();
        assert!(producers.contains(&"lp".to_string()), "{producers:?}");
    }
    // A consumer alone gets the default producer injected.
    let alone = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: latency-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: latency-scorer
";
    let loaded = load(alone).expect("loads");
    assert!(loaded.scheduler.producers().iter().any(|p| &*p.name == "predicted-latency-producer"));
    // A named producer that does not exist is an error.
    let missing = alone.replace(
        "- type: latency-scorer\n",
        "- type: latency-scorer\n  parameters: {latencyPredictionInfoProducerName: nope}\n",
    );
    assert!(load(&missing).is_err());
}
