//! The tokenize step end to end: a real epp on loopback with a `token-producer` backend;
//! requests are routed whether tokenization succeeds or misses its deadline, and the
//! outcome is visible in `/metrics`.

mod common;

use common::*;
use tokio::net::TcpListener;

fn config(token_params: &str) -> String {
    format!(
        r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {token_params}
- type: queue-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: prefix-cache-scorer
    weight: 1
"#
    )
}

/// A render server that accepts connections and never answers.
async fn silent_server() -> (TcpListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

async fn route(epp: &TestEpp, body: &[u8]) -> String {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((BUFFERED, NONE)))).await;
    assert!(is_request_headers(&ex.next().await));
    ex.send(request_body(body, true)).await;
    let reply = ex.next().await;
    set_header(&reply, "x-gateway-destination-endpoint").expect("routed")
}

fn counter(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

#[tokio::test]
async fn render_deadline_miss_still_routes_and_is_counted() {
    let pod = FakeVllm::start([127, 0, 0, 2], 0, 0, 0.1).await;
    // Held open so connections are accepted by the kernel but never answered.
    let (_listener, render) = silent_server().await;
    let cfg = config(&format!("{{modelName: m, vllm: {{url: \"http://{render}\", timeout: 100ms}}}}"));
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(&cfg), |_| {}).await;
    epp.wait_endpoints(&["pod"]).await;
    assert_eq!(route(&epp, &chat("m", "hello", false)).await, pod.addr.to_string());
    let metrics = scrape(epp.app.metrics_addr).await;
    assert_eq!(
        counter(&metrics, r#"llm_d_epp_tokenize_total{backend="vllm",outcome="timeout"}"#),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn local_backend_tokenizes_small_and_offloaded_bodies() {
    let pod = FakeVllm::start([127, 0, 0, 2], 0, 0, 0.1).await;
    let dir = format!("{}/tests/fixtures/tokenizers/llama3", env!("CARGO_MANIFEST_DIR"));
    let cfg = config(&format!("{{local: {{models: {{m: \"{dir}\"}}, timeout: 10s}}}}"));
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(&cfg), |_| {}).await;
    epp.wait_endpoints(&["pod"]).await;
    assert_eq!(route(&epp, &chat("m", "hello", false)).await, pod.addr.to_string());
    // Larger than the 256 KiB inline limit: parsed and scheduled on the blocking pool.
    let big = chat("m", &"a long prompt line\n".repeat(16_000), false);
    assert!(big.len() > 256 * 1024);
    assert_eq!(route(&epp, &big).await, pod.addr.to_string());
    let metrics = scrape(epp.app.metrics_addr).await;
    assert_eq!(counter(&metrics, r#"llm_d_epp_tokenize_total{backend="local",outcome="ok"}"#), Some(2.0), "{metrics}");
}
