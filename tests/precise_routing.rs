//! Precise prefix routing end to end: real ZeroMQ PUB sockets (one per fake vLLM pod, found
//! through `kvEventsEndpoint` in pod-discovery mode) publish vLLM 0.33-format KV events to
//! the real epp; a completions request given as token ids lands on the pod holding its
//! prefix, and stops preferring it after that pod reports `AllBlocksCleared`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use rmpv::Value;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

const BLOCK: usize = 16;

fn tokens() -> Vec<u32> {
    (1000..1000 + 4 * BLOCK as u32).collect()
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

fn batch(events: Vec<Value>) -> Bytes {
    let v = Value::Array(vec![Value::F64(1_767_225_600.0), Value::Array(events), Value::Nil]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &v).expect("encode");
    Bytes::from(out)
}

fn stored(tokens: &[u32]) -> Value {
    stored_with_block(tokens, BLOCK)
}

fn stored_with_block(tokens: &[u32], block: usize) -> Value {
    let hashes = (0..tokens.len() / block).map(|i| Value::from(0xA000_u64 + i as u64)).collect();
    map(vec![
        ("type", Value::from("BlockStored")),
        ("block_hashes", Value::Array(hashes)),
        ("parent_block_hash", Value::Nil),
        ("token_ids", Value::Array(tokens.iter().map(|t| Value::from(*t)).collect())),
        ("block_size", Value::from(block as u64)),
        ("medium", Value::from("GPU")),
    ])
}

fn cleared() -> Value {
    map(vec![("type", Value::from("AllBlocksCleared"))])
}

struct Pod {
    metrics: FakeVllm,
    publisher: PubSocket,
    endpoint: String,
    seq: u64,
}

impl Pod {
    async fn start(ip: [u8; 4]) -> Self {
        let metrics = FakeVllm::start(ip, 0, 0, 0.2).await;
        let mut publisher = PubSocket::new();
        let endpoint = publisher.bind("tcp://127.0.0.1:0").await.expect("bind PUB").to_string();
        Self { metrics, publisher, endpoint, seq: 0 }
    }

    async fn publish(&mut self, payload: Bytes) {
        let topic = format!("kv@{}@m", self.metrics.addr);
        let frames = vec![Bytes::from(topic), Bytes::copy_from_slice(&self.seq.to_be_bytes()), payload];
        self.seq += 1;
        self.publisher.send(ZmqMessage::try_from(frames).expect("frames")).await.expect("send");
    }
}

fn endpoints_with_kv(pods: &[(&str, &Pod)]) -> String {
    let mut s = String::from("endpoints:\n");
    for (name, pod) in pods {
        s.push_str(&format!(
            "  - name: {name}\n    address: \"{}\"\n    port: {}\n    kvEventsEndpoint: \"{}\"\n",
            pod.metrics.addr.ip(),
            pod.metrics.addr.port(),
            pod.endpoint
        ));
    }
    s
}

const CONFIG: &str = r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSizeTokens: 16}
    kvEventsConfig: {discoverPods: true}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: queue-scorer, weight: 1}
"#;

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Publishes `payload` until the subscriber has applied a message counted by `counter`
/// (ZeroMQ drops messages sent before a subscription is established: the slow-joiner
/// problem). Bounded; each round ends with the app's flush barrier.
async fn deliver(epp: &TestEpp, pod: &mut Pod, payload: Bytes, counter: &str) {
    let before = metric(&scrape(epp.app.metrics_addr).await, counter);
    for _ in 0..200 {
        pod.publish(payload.clone()).await;
        epp.app.flush().await;
        if metric(&scrape(epp.app.metrics_addr).await, counter) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await; // wait for the SUB socket to join
    }
    panic!("KV event never delivered");
}

async fn route(epp: &TestEpp) -> String {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = serde_json::to_vec(&serde_json::json!({"model": "m", "prompt": tokens()})).unwrap();
    ex.send(request_headers("/v1/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&body, true)).await;
    set_header(&ex.next().await, "x-gateway-destination-endpoint").expect("destination")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_prompt_follows_kv_events_and_forgets_after_clear() {
    let a = Pod::start([127, 0, 0, 30]).await;
    let mut b = Pod::start([127, 0, 0, 31]).await;
    let c = Pod::start([127, 0, 0, 32]).await;
    let epp = TestEpp::start(&endpoints_with_kv(&[("a", &a), ("b", &b), ("c", &c)]), Some(CONFIG), |_| {}).await;
    epp.wait_scraped(|set| {
        ["a", "b", "c"].iter().all(|n| set.get(n).is_some_and(|e| e.metrics.load().updated_at.is_some()))
    })
    .await;

    deliver(&epp, &mut b, batch(vec![stored(&tokens())]), "epp_kv_events_total{kind=\"block_stored\"").await;
    for _ in 0..10 {
        assert_eq!(route(&epp).await, b.metrics.addr.to_string(), "the pod holding the prefix wins");
    }

    deliver(&epp, &mut b, batch(vec![cleared()]), "epp_kv_events_total{kind=\"all_blocks_cleared\"").await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..60 {
        seen.insert(route(&epp).await);
    }
    assert!(seen.len() > 1, "after AllBlocksCleared the former holder is no longer preferred: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_drift_is_counted_and_reported_in_readiness() {
    let mut a = Pod::start([127, 0, 0, 33]).await;
    let config = CONFIG.replace(
        "tokenProcessorConfig: {blockSizeTokens: 16}",
        "tokenProcessorConfig: {blockSizeTokens: 16, hashSeed: \"42\", hashAlgorithm: sha256}",
    );
    let epp = TestEpp::start(&endpoints_with_kv(&[("a", &a)]), Some(&config), |_| {}).await;
    let (status, body) = http_get(epp.app.metrics_addr, "/readyz").await;
    assert_eq!(status, 200);
    assert!(!body.contains("drift"), "{body}");
    // vLLM publishes 32-token blocks while the config says 16: a block-size drift.
    deliver(&epp, &mut a, batch(vec![stored_with_block(&tokens(), 32)]), "epp_kv_drift_mismatches_total").await;
    let (status, body) = http_get(epp.app.metrics_addr, "/readyz").await;
    assert_eq!(status, 200);
    assert!(body.contains("kv-events drift: endpoint a") && body.contains("block_size"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_indexing_keeps_a_burst_on_the_first_pick_before_events_arrive() {
    let pods =
        [Pod::start([127, 0, 0, 34]).await, Pod::start([127, 0, 0, 35]).await, Pod::start([127, 0, 0, 36]).await];
    let config = CONFIG.replace(
        "kvEventsConfig: {discoverPods: true}",
        "kvEventsConfig: {discoverPods: true}\n    speculativeIndexing: true\n    speculativeTTL: 1h",
    );
    let list: Vec<(&str, &Pod)> = ["a", "b", "c"].into_iter().zip(pods.iter()).collect();
    let epp = TestEpp::start(&endpoints_with_kv(&list), Some(&config), |_| {}).await;
    epp.wait_scraped(|set| {
        ["a", "b", "c"].iter().all(|n| set.get(n).is_some_and(|e| e.metrics.load().updated_at.is_some()))
    })
    .await;
    // No KV event was published: only the speculative entries of the first pick can
    // make every later request of the burst land on the same pod.
    let first = route(&epp).await;
    for _ in 0..20 {
        assert_eq!(route(&epp).await, first, "the burst follows the speculative entries");
    }
    let text = scrape(epp.app.metrics_addr).await;
    let added = metric(&text, "epp_kv_speculative_blocks_total{op=\"added\"}");
    assert_eq!(added, 21.0 * (tokens().len() / 16) as f64, "{text}");
}

/// `GET /debug/state` as JSON.
async fn debug_state(epp: &TestEpp) -> serde_json::Value {
    let (status, body) = http_get(epp.app.metrics_addr, "/debug/state").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

/// `/debug/state` and `epp_kv_index_endpoint_blocks` follow real KV events from real pods:
/// endpoints with fresh metrics, blocks per endpoint, one connected subscription per pod with
/// the age of its last message; a pod that leaves disappears from all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_state_and_index_size_per_endpoint_follow_kv_events() {
    let mut a = Pod::start([127, 0, 0, 37]).await;
    let mut b = Pod::start([127, 0, 0, 38]).await;
    let epp = TestEpp::start(&endpoints_with_kv(&[("a", &a), ("b", &b)]), Some(CONFIG), |_| {}).await;
    epp.wait_scraped(|set| {
        ["a", "b"].iter().all(|n| set.get(n).is_some_and(|e| e.metrics.load().updated_at.is_some()))
    })
    .await;
    deliver(&epp, &mut a, batch(vec![stored(&tokens())]), "epp_kv_events_total{kind=\"block_stored\"").await;
    deliver(&epp, &mut b, batch(vec![stored(&tokens()[..BLOCK])]), "epp_kv_events_total{kind=\"block_stored\"").await;

    let blocks = (tokens().len() / BLOCK) as u64;
    let state = debug_state(&epp).await;
    let endpoints = state["endpoints"].as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 2, "{state}");
    assert_eq!(endpoints[0]["name"], "a");
    assert_eq!(endpoints[0]["address"], a.metrics.addr.to_string());
    assert!(endpoints[0]["metrics_age_seconds"].as_f64().is_some(), "{state}");
    assert!(["fresh", "stale"].contains(&endpoints[0]["metrics_state"].as_str().unwrap_or_default()), "{state}");
    assert_eq!(state["prefix_index_blocks"]["a"], blocks, "{state}");
    assert_eq!(state["prefix_index_blocks"]["b"], 1, "{state}");
    let subscription = |state: &serde_json::Value, name: &str| {
        state["kv_event_subscriptions"]
            .as_array()
            .expect("subscriptions")
            .iter()
            .find(|s| s["endpoint"] == name)
            .cloned()
    };
    let sub_a = subscription(&state, "a").unwrap_or_else(|| panic!("no subscription of a: {state}"));
    assert_eq!(sub_a["socket"], a.endpoint);
    assert_eq!(sub_a["connected"], true, "{state}");
    assert!(sub_a["last_message_age_seconds"].as_f64().is_some_and(|age| age < 60.0), "{state}");
    assert!(subscription(&state, "b").is_some(), "{state}");
    assert!(state["flow_control"].is_null(), "no flowControl gate: {state}");
    let text = scrape(epp.app.metrics_addr).await;
    assert_eq!(metric(&text, "epp_kv_index_endpoint_blocks{endpoint=\"a\"}"), blocks as f64, "{text}");
    assert_eq!(metric(&text, "epp_kv_index_endpoint_blocks{endpoint=\"b\"}"), 1.0, "{text}");

    // b leaves the pool: its subscription and index series go (the reader stops asynchronously).
    std::fs::write(&epp.endpoints_file, endpoints_with_kv(&[("a", &a)])).expect("rewrite endpoints");
    epp.wait_endpoints(&["a"]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        epp.app.flush().await;
        let state = debug_state(&epp).await;
        let text = scrape(epp.app.metrics_addr).await;
        if subscription(&state, "b").is_none() && !text.contains("epp_kv_index_endpoint_blocks{endpoint=\"b\"}") {
            assert_eq!(state["endpoints"].as_array().map(Vec::len), Some(1), "{state}");
            assert!(text.contains("epp_kv_index_endpoint_blocks{endpoint=\"a\"}"), "{text}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "b still listed: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await; // poll interval of the bounded wait
    }
}
