//! Admitters end to end through a real ext_proc stream: `latency-slo-admitter` with a fake
//! prediction sidecar on loopback denies a sheddable request whose SLO no endpoint can meet
//! (500 `request cannot be admitted`) and routes the same request with a looser SLO or a
//! non-negative priority; `probabilistic-admitter` sheds a sheddable request on a loaded pool
//! (probability 1) while a critical one is routed. Decisions are counted per admitter.

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

/// Fake prediction sidecar: every endpoint is predicted `ttft_ms` TTFT and 10 ms TPOT.
async fn fake_predictor(ttft_ms: f64) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        // Ends when the test's runtime stops.
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| async move {
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let n = v["requests"].as_array().map_or(0, Vec::len);
                    let preds = vec![json!({"ttft_ms": ttft_ms, "tpot_ms": 10.0}); n];
                    let answer = json!({"predictions": preds}).to_string();
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(answer))))
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    addr
}

/// Sends a chat request with `headers`; returns the first reply.
async fn ask(epp: &TestEpp, headers: &[(&str, &str)]) -> epp::proto::ext_proc::ProcessingResponse {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", headers, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    ex.next().await
}

async fn start(pod: &FakeVllm, config: &str) -> TestEpp {
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(config), |s| {
        s.objectives = [("batch".to_string(), -1)].into();
    })
    .await;
    epp.wait_scraped(|set| set.get("pod").is_some_and(|e| e.metrics.load().updated_at.is_some())).await;
    epp
}

/// `epp_admitter_decisions_total` of one admitter and decision.
fn decisions(metrics: &str, plugin: &str, decision: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix("epp_admitter_decisions_total{")?;
        let matches =
            rest.contains(&format!("decision=\"{decision}\"")) && rest.contains(&format!("plugin_name=\"{plugin}\""));
        matches.then(|| l.rsplit(' ').next().and_then(|v| v.parse().ok())).flatten()
    })
}

#[tokio::test]
async fn latency_slo_admitter_denies_sheddable_requests_that_cannot_meet_their_slo() {
    let predictor = fake_predictor(900.0).await;
    let config = format!(
        r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {{predictionServerUrls: ["http://{predictor}"], training: false, timeout: 5s}}
- type: latency-slo-admitter
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}]
"#
    );
    // Busy (2 running) and warm (KV 30 %): neither idle nor cold, so predictions decide.
    let pod = FakeVllm::start([127, 0, 0, 61], 0, 2, 0.3).await;
    let epp = start(&pod, &config).await;
    let dest = |r: &epp::proto::ext_proc::ProcessingResponse| set_header(r, "x-gateway-destination-endpoint");

    let batch = "x-gateway-inference-objective";
    let denied = ask(&epp, &[(batch, "batch"), ("x-slo-ttft-ms", "200")]).await;
    let (status, body) = immediate(&denied).expect("denied with an immediate response");
    assert_eq!(status, 500);
    assert_eq!(
        body,
        "inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request"
    );

    let loose = ask(&epp, &[(batch, "batch"), ("x-llm-d-slo-ttft-ms", "1000")]).await;
    assert_eq!(dest(&loose), Some(pod.addr.to_string()), "900 ms predicted meets a 1000 ms SLO");
    let critical = ask(&epp, &[("x-slo-ttft-ms", "200")]).await;
    assert_eq!(dest(&critical), Some(pod.addr.to_string()), "priority 0 is never denied");
    let no_slo = ask(&epp, &[(batch, "batch")]).await;
    assert_eq!(dest(&no_slo), Some(pod.addr.to_string()), "no SLO, nothing to judge");

    let metrics = scrape(epp.app.metrics_addr).await;
    assert_eq!(decisions(&metrics, "latency-slo-admitter", "rejected"), Some(1.0), "{metrics}");
    assert_eq!(decisions(&metrics, "latency-slo-admitter", "admitted"), Some(3.0), "{metrics}");
    assert!(metrics.contains(r#"extension_point="Admission""#), "admitter calls are timed");
}

#[tokio::test]
async fn probabilistic_admitter_sheds_sheddable_requests_on_a_loaded_pool() {
    let config = r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: probabilistic-admitter
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
"#;
    // KV 70 %: below the saturation detector's 80 % (the legacy rule does not shed), but
    // 0.7 / 0.8 = 0.875 saturation for the admitter, far past its 100 % point (~0.32).
    let pod = FakeVllm::start([127, 0, 0, 62], 0, 1, 0.7).await;
    let epp = start(&pod, config).await;

    let (status, body) = immediate(&ask(&epp, &[("x-gateway-inference-objective", "batch")]).await).expect("shed");
    assert_eq!(status, 500);
    assert!(
        body.starts_with("inference error: Internal - request cannot be admitted: probabilistic-admitter: rejected, saturation=0.875 prob=1.00"),
        "{body}"
    );
    let routed = ask(&epp, &[]).await;
    assert_eq!(set_header(&routed, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    let metrics = scrape(epp.app.metrics_addr).await;
    assert_eq!(decisions(&metrics, "probabilistic-admitter", "rejected"), Some(1.0), "{metrics}");
}
