//! Encoder-cache affinity end to end through ext_proc: with equal load and only the
//! `mm-embeddings-cache-scorer` deciding, a chat request carrying an image goes to the
//! endpoint that served that image before. Items are identified by their URL (no tokenizer)
//! or by vLLM's content hashes from a fake render server (the same picture under another URL
//! still follows its first endpoint).

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const SCORER_ONLY: &str = r#"
plugins:
- type: mm-embeddings-cache-producer
  parameters: {cacheSizeInMBPerServer: 64}
- type: mm-embeddings-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: mm-embeddings-cache-scorer
    weight: 4
  - pluginRef: max-score-picker
"#;

fn image_chat(url: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": url}}]}],
    }))
    .unwrap()
}

/// Routes one chat request, plays a short response, and returns the destination.
async fn route(client: &mut ExtProcClient, body: &[u8]) -> String {
    let mut ex = Exchange::open(client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(body, true)).await;
    let reply = ex.next().await;
    let destination = set_header(&reply, "x-gateway-destination-endpoint").expect("destination");
    let _echoed_body = ex.next().await;
    ex.send(response_headers("200", "application/json")).await;
    let _ = ex.next().await;
    ex.send(response_body(br#"{"id":"x","model":"m","choices":[]}"#, true)).await;
    let _ = ex.next().await;
    destination
}

type ExtProcClient =
    epp::proto::ext_proc::external_processor_client::ExternalProcessorClient<tonic::transport::Channel>;

async fn three_pods(config: &str) -> (Vec<FakeVllm>, TestEpp) {
    let pods = vec![
        FakeVllm::start([127, 0, 0, 50], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 51], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 52], 0, 0, 0.1).await,
    ];
    let eps = endpoints_yaml(&[("a", pods[0].addr, &[]), ("b", pods[1].addr, &[]), ("c", pods[2].addr, &[])]);
    let epp = TestEpp::start(&eps, Some(config), |_| {}).await;
    epp.wait_waiting(&[("a", 0), ("b", 0), ("c", 0)]).await;
    (pods, epp)
}

#[tokio::test]
async fn repeated_images_follow_their_first_endpoint() {
    let (_pods, epp) = three_pods(SCORER_ONLY).await;
    let mut client = epp.client().await;
    let cat = route(&mut client, &image_chat("http://img.example/cat.png")).await;
    let dog = route(&mut client, &image_chat("http://img.example/dog.png")).await;
    for round in 0..3 {
        assert_eq!(route(&mut client, &image_chat("http://img.example/cat.png")).await, cat, "cat, round {round}");
        assert_eq!(route(&mut client, &image_chat("http://img.example/dog.png")).await, dog, "dog, round {round}");
    }
    let text = scrape(epp.app.metrics_addr).await;
    let queries = "llm_d_epp_encoder_cache_queries_total{modality=\"image\",plugin_name=\"mm-embeddings-cache-producer\",plugin_type=\"mm-embeddings-cache-producer\"} 8";
    assert!(text.contains(queries), "{text}");
    assert!(text.contains("llm_d_epp_encoder_cache_hit_ratio_count{plugin_name=\"mm-embeddings-cache-producer\",plugin_type=\"mm-embeddings-cache-producer\"} 24"));
    assert!(
        text.lines().any(|l| l.starts_with("llm_d_epp_encoder_cache_hits_total{") && l.contains("modality=\"image\""))
    );
}

/// A fake vLLM render server: token ids plus `features.mm_hashes` naming each image by its
/// content (`cat` for both the URL and the inline copy of the cat picture).
async fn fake_render_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let ok = req.uri().path() == "/v1/chat/completions/render";
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let text = String::from_utf8_lossy(&body);
                    let hash = if text.contains("cat.png") || text.contains("Y2F0") { "cat" } else { "dog" };
                    let answer = format!(
                        r#"{{"token_ids":[1,2,3],"features":{{"mm_hashes":{{"image":["{hash}"]}},"mm_placeholders":{{"image":[{{"offset":1,"length":256}}]}}}}}}"#
                    );
                    let mut resp = hyper::Response::new(Full::new(Bytes::from(answer)));
                    if !ok {
                        *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                    }
                    Ok::<_, Infallible>(resp)
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn vllm_content_hashes_identify_images_across_urls() {
    let render = fake_render_server().await;
    let config = format!(
        r#"
plugins:
- type: token-producer
  parameters: {{modelName: m, vllm: {{url: "http://{render}"}}}}
- type: mm-embeddings-cache-producer
  parameters: {{cacheSizeInEmbeddingsPerServer: 8192}}
- type: mm-embeddings-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: mm-embeddings-cache-scorer
"#
    );
    let (_pods, epp) = three_pods(&config).await;
    let mut client = epp.client().await;
    let cat = route(&mut client, &image_chat("http://img.example/cat.png")).await;
    let dog = route(&mut client, &image_chat("http://img.example/dog.png")).await;
    for round in 0..3 {
        let inline = route(&mut client, &image_chat("data:image/png;base64,Y2F0")).await;
        assert_eq!(inline, cat, "the inline cat has the cat's content hash, round {round}");
        assert_eq!(route(&mut client, &image_chat("http://img.example/dog.png")).await, dog, "dog, round {round}");
    }
}

/// A fake prediction server: answers every bulk call (TTFT 100 ms, TPOT 10 ms) and forwards
/// the asked feature lists on the channel.
async fn fake_predictor() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                        let asked = v["requests"].as_array().cloned().unwrap_or_default();
                        let preds: Vec<_> =
                            asked.iter().map(|_| serde_json::json!({"ttft_ms": 100.0, "tpot_ms": 10.0})).collect();
                        let _ = tx.send(serde_json::Value::Array(asked));
                        let answer = serde_json::json!({"predictions": preds}).to_string();
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(answer))))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (addr, rx)
}

async fn next(asked: &mut tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>) -> serde_json::Value {
    tokio::time::timeout(WAIT, asked.recv()).await.expect("prediction call").expect("channel open")
}

#[tokio::test]
async fn latency_predictions_carry_encoder_cache_sizes() {
    let (predictor, mut asked) = fake_predictor().await;
    let config = format!(
        r#"
plugins:
- type: predicted-latency-producer
  parameters: {{predictionServerUrls: ["http://{predictor}"], training: false, timeout: 5s, useEncoderCacheFeatures: true}}
- type: mm-embeddings-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: mm-embeddings-cache-scorer
"#
    );
    // Distinct queue lengths tell the endpoints apart in the predictor's feature lists.
    let pods = [
        FakeVllm::start([127, 0, 0, 53], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 54], 1, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 55], 2, 0, 0.1).await,
    ];
    let eps = endpoints_yaml(&[("a", pods[0].addr, &[]), ("b", pods[1].addr, &[]), ("c", pods[2].addr, &[])]);
    let epp = TestEpp::start(&eps, Some(&config), |_| {}).await;
    epp.wait_waiting(&[("a", 0), ("b", 1), ("c", 2)]).await;
    let mut client = epp.client().await;
    let first = route(&mut client, &image_chat("http://img.example/cat.png")).await;
    let waiting_of_first = pods.iter().position(|p| p.addr.to_string() == first).expect("a pod") as u64;
    let sizes = |v: &serde_json::Value| -> Vec<(u64, u64, u64)> {
        let list = v.as_array().cloned().unwrap_or_default();
        let mut out: Vec<_> = list
            .iter()
            .map(|f| {
                let n = |k: &str| f[k].as_u64().unwrap_or(u64::MAX);
                (n("num_request_waiting"), n("encoder_input_size"), n("encoder_matched_size"))
            })
            .collect();
        out.sort_unstable();
        out
    };
    assert_eq!(sizes(&next(&mut asked).await), vec![(0, 1, 0), (1, 1, 0), (2, 1, 0)], "nothing cached yet");
    route(&mut client, &image_chat("http://img.example/cat.png")).await;
    let expected: Vec<_> = (0..3).map(|w| (w, 1, u64::from(w == waiting_of_first))).collect();
    assert_eq!(sizes(&next(&mut asked).await), expected, "the first endpoint holds the image");
    route(&mut client, &chat("m", "text only", false)).await;
    assert_eq!(sizes(&next(&mut asked).await), vec![(0, 0, 0), (1, 0, 0), (2, 0, 0)], "text-only: zeros");
}
