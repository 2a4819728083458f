//! The precise producer's shared Redis index (`kvBlockIndexConfig.redisConfig`) against a real
//! `redis-server`: two epp instances share one index fed by KV events (real ZeroMQ, central
//! bind) delivered to only one of them; a Redis outage or freeze leaves requests routed
//! (without prefix scores) and counted; and the keys and fields are llm-d's layout byte for
//! byte, read and written both ways.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::process::free_port;
use common::redis_server::RedisServer;
use common::*;
use epp::kvcache::events::{BlockRemoved, BlockStored, EventBatch, KvEvent, Tier};
use epp::kvcache::index::{KeyMode, TierWeights};
use epp::kvcache::keys::RequestKeyer;
use epp::kvcache::subscriber::KvEventSource;
use epp::kvcache::{KvCacheMetrics, RedisIndex, RedisIndexConfig, encode_batch};
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

const BLOCK: usize = 16;

fn prompt() -> Vec<u32> {
    (2000..2000 + 4 * BLOCK as u32).collect()
}

fn stored(first_hash: u64, parent: Option<u64>, tokens: &[u32], block: usize) -> KvEvent {
    KvEvent::BlockStored(BlockStored {
        block_hashes: (0..(tokens.len() / block) as u64).map(|i| first_hash + i).collect(),
        parent_block_hash: parent,
        token_ids: tokens.to_vec(),
        block_size: block as u32,
        medium: Some(Tier::Gpu),
        ..BlockStored::default()
    })
}

fn encoded(events: Vec<KvEvent>) -> Bytes {
    Bytes::from(encode_batch(&EventBatch { ts: 1.0, events, ..EventBatch::default() }))
}

/// Precise producer bound centrally on `central` with the shared index at `redis_url`.
fn config(redis_url: &str, central: u16) -> String {
    format!(
        r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {{blockSizeTokens: {BLOCK}}}
    indexerConfig:
      kvBlockIndexConfig:
        redisConfig: {{address: "{redis_url}", lookupTimeout: 200ms, writeTimeout: 1s}}
    kvEventsConfig: {{zmqEndpoint: "tcp://127.0.0.1:{central}", discoverPods: false}}
- type: prefix-cache-scorer
  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - {{pluginRef: prefix-cache-scorer, weight: 3}}
  - {{pluginRef: queue-scorer, weight: 1}}
"#
    )
}

struct Pods {
    vllm: Vec<FakeVllm>,
}

impl Pods {
    async fn start(first_ip: u8) -> Self {
        let mut vllm = Vec::new();
        for i in 0..3 {
            vllm.push(FakeVllm::start([127, 0, 0, first_ip + i], 0, 0, 0.2).await);
        }
        Self { vllm }
    }

    fn endpoints(&self) -> String {
        let specs: Vec<EndpointSpec<'_>> =
            ["a", "b", "c"].into_iter().zip(&self.vllm).map(|(n, v)| (n, v.addr, &[][..])).collect();
        endpoints_yaml(&specs)
    }
}

async fn start_epp(pods: &Pods, redis_url: &str) -> (TestEpp, u16) {
    let central = free_port();
    let epp = TestEpp::start(&pods.endpoints(), Some(&config(redis_url, central)), |_| {}).await;
    epp.wait_scraped(|set| {
        ["a", "b", "c"].iter().all(|n| set.get(n).is_some_and(|e| e.metrics.load().updated_at.is_some()))
    })
    .await;
    (epp, central)
}

async fn metrics_text(epp: &TestEpp) -> String {
    scrape(epp.app.metrics_addr).await
}

/// Routes the prompt (given as token ids) and returns the destination.
async fn route(epp: &TestEpp) -> String {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = serde_json::to_vec(&serde_json::json!({"model": "m", "prompt": prompt()})).expect("json");
    ex.send(request_headers("/v1/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&body, true)).await;
    let reply = ex.next().await;
    set_header(&reply, "x-gateway-destination-endpoint").unwrap_or_else(|| panic!("no destination: {reply:?}"))
}

/// Publishes `payload` as pod `pod` (a PUB connected to `epp`'s central socket) until `epp`
/// has applied a batch counted under `series` (a PUB that just connected drops messages until
/// the subscription reaches it). Bounded; each round ends with the app's flush barrier.
async fn deliver(epp: &TestEpp, publisher: &mut PubSocket, pod: &FakeVllm, payload: Bytes, series: &str) {
    let before = metric_sum(&metrics_text(epp).await, series);
    let topic = Bytes::from(format!("kv@{}@m", pod.addr));
    for seq in 0..200u64 {
        let frames = vec![topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload.clone()];
        publisher.send(ZmqMessage::try_from(frames).expect("frames")).await.expect("send");
        epp.app.flush().await;
        if metric_sum(&metrics_text(epp).await, series) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await; // the subscription is still on its way
    }
    panic!("KV event never applied");
}

const STORED_APPLIED: &str = "epp_kv_events_total{kind=\"block_stored\",outcome=\"applied\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_events_received_by_one_replica_steer_the_other() {
    let redis = RedisServer::start();
    let pods = Pods::start(50).await;
    let (fed, central) = start_epp(&pods, &redis.url()).await;
    let (other, _) = start_epp(&pods, &redis.url()).await;
    let mut publisher = PubSocket::new();
    publisher.connect(&format!("tcp://127.0.0.1:{central}")).await.expect("connect to the central socket");

    let holder = &pods.vllm[1];
    deliver(&fed, &mut publisher, holder, encoded(vec![stored(0xB000, None, &prompt(), BLOCK)]), STORED_APPLIED).await;
    let other_text = metrics_text(&other).await;
    assert_eq!(metric_sum(&other_text, "epp_kv_events_total"), 0.0, "the other replica received no event");
    for _ in 0..10 {
        assert_eq!(route(&other).await, holder.addr.to_string(), "the replica without events follows the index");
    }
    let text = metrics_text(&other).await;
    assert_eq!(metric_sum(&text, "epp_kv_redis_lookups_total{outcome=\"ok\"}"), 10.0, "{text}");
    assert_eq!(metric_sum(&text, "epp_kv_lookup_hit_blocks_total"), 40.0, "4 blocks matched per lookup");
    let fed_text = metrics_text(&fed).await;
    assert!(metric_sum(&fed_text, "epp_kv_redis_writes_total{outcome=\"ok\"}") >= 1.0, "{fed_text}");

    // AllBlocksCleared received by the fed replica empties the holder's entries for both.
    let cleared = "epp_kv_events_total{kind=\"all_blocks_cleared\",outcome=\"applied\"}";
    deliver(&fed, &mut publisher, holder, encoded(vec![KvEvent::AllBlocksCleared]), cleared).await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..40 {
        seen.insert(route(&other).await);
    }
    assert!(seen.len() > 1, "after AllBlocksCleared the former holder is no longer preferred: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_and_freeze_leave_requests_routed_and_counted() {
    let mut redis = RedisServer::start();
    let pods = Pods::start(60).await;
    let (epp, _) = start_epp(&pods, &redis.url()).await;
    let addrs: Vec<String> = pods.vllm.iter().map(|v| v.addr.to_string()).collect();
    assert!(addrs.contains(&route(&epp).await));

    redis.kill();
    for _ in 0..5 {
        assert!(addrs.contains(&route(&epp).await), "routed while Redis is down");
    }
    let text = metrics_text(&epp).await;
    assert_eq!(metric_sum(&text, "epp_kv_redis_lookups_total{outcome=\"error\"}"), 5.0, "{text}");

    redis.restart();
    redis.freeze();
    // Whatever the connection state, each lookup ends by its 200 ms deadline (timeout) or
    // fails on the dead connection (error); the request is routed either way.
    let t0 = std::time::Instant::now();
    for _ in 0..3 {
        assert!(addrs.contains(&route(&epp).await), "routed while Redis is frozen");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "bounded by the lookup deadline: {:?}", t0.elapsed());
    let text = metrics_text(&epp).await;
    let failed = metric_sum(&text, "epp_kv_redis_lookups_total{outcome=\"error\"}")
        + metric_sum(&text, "epp_kv_redis_lookups_total{outcome=\"timeout\"}");
    assert_eq!(failed, 8.0, "{text}");
    redis.thaw();
}

fn redis_index(url: &str) -> RedisIndex {
    let config = RedisIndexConfig {
        address: url.to_string(),
        lookup_timeout: Duration::from_secs(1),
        write_timeout: Duration::from_secs(1),
        key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 4 },
        tier_weights: TierWeights::default(),
    };
    let metrics = Arc::new(KvCacheMetrics::register(&prometheus::Registry::new()).expect("metrics"));
    RedisIndex::try_new(config, metrics).expect("address")
}

fn source(name: &str, ip: [u8; 4], port: u16) -> KvEventSource {
    KvEventSource { name: name.into(), address: ip.into(), port, rank: 0, kv_events_endpoint: None }
}

fn zrange(c: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(c).expect("zrange")
}

fn hgetall(c: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    redis::cmd("HGETALL").arg(key).query(c).expect("hgetall")
}

/// The worked example of the reference (§8): pod `10.0.0.5:8000`, model `Qwen/Qwen3-0.6B`,
/// block 4, BlockStored `[17, 18]` over tokens 1..8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_fields_are_llm_ds_layout_both_ways() {
    const QWEN: &str = "Qwen/Qwen3-0.6B";
    const K1: &str = "12477849404512668933";
    const K2: &str = "14303407131179071413";
    const FIELD: &str =
        r#"{"PodIdentifier":"10.0.0.5:8000","DeviceTier":"gpu","Speculative":false,"HasGroup":false,"GroupIdx":0}"#;
    let server = RedisServer::start();
    let index = redis_index(&server.url());
    index.set_sources(&[source("pod-5", [10, 0, 0, 5], 8000), source("pod-6", [10, 0, 0, 6], 8000)]);
    let mut raw = redis::Client::open(server.url()).expect("client").get_connection().expect("connect");

    let tokens: Vec<u32> = (1..=8).collect();
    let first = EventBatch { events: vec![stored(17, None, &tokens, 4)], ..EventBatch::default() };
    index.apply("pod-5", QWEN, &first).await;
    assert_eq!(hgetall(&mut raw, K1), [(FIELD.to_string(), String::new())]);
    assert_eq!(hgetall(&mut raw, K2), [(FIELD.to_string(), String::new())]);
    assert_eq!(zrange(&mut raw, "engine:17"), [K1, "0"]);
    assert_eq!(zrange(&mut raw, "engine:18"), [K2, "1"]);

    // An entry written the way llm-d writes it (another pod, a KV-cache group) is read back.
    let llm_d_field =
        r#"{"PodIdentifier":"10.0.0.6:8000","DeviceTier":"cpu","Speculative":false,"HasGroup":true,"GroupIdx":1}"#;
    let () = redis::cmd("HSET").arg(K1).arg(llm_d_field).arg("").query(&mut raw).expect("hset");
    let keys = [K1.parse().expect("u64"), K2.parse().expect("u64")];
    let mut found = index.lookup(&keys).await.expect("lookup");
    found.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
    let summary: Vec<(String, usize, f64)> =
        found.iter().map(|m| (m.endpoint.to_string(), m.blocks, m.weighted)).collect();
    assert_eq!(summary, [("pod-5".into(), 2, 2.0), ("pod-6".into(), 1, 0.8)]);

    // A continuation chains from engine:18's request key, as llm-d's GetRequestKey does.
    let next: Vec<u32> = (9..=12).collect();
    let more = EventBatch { events: vec![stored(19, Some(18), &next, 4)], ..EventBatch::default() };
    index.apply("pod-5", QWEN, &more).await;
    let k3 = RequestKeyer::default().prompt_keys(QWEN, None, &(1..=12).collect::<Vec<u32>>(), 4)[2].to_string();
    assert_eq!(zrange(&mut raw, "engine:19"), [k3.as_str(), "0"]);
    assert_eq!(hgetall(&mut raw, &k3), [(FIELD.to_string(), String::new())]);

    // BlockRemoved drops the entry and prunes the emptied hash and its engine ZSET.
    let removed = KvEvent::BlockRemoved(BlockRemoved { block_hashes: vec![18], medium: None, group_idx: None });
    index.apply("pod-5", QWEN, &EventBatch { events: vec![removed], ..EventBatch::default() }).await;
    let exists = |c: &mut redis::Connection, k: &str| -> bool { redis::cmd("EXISTS").arg(k).query(c).expect("exists") };
    assert!(!exists(&mut raw, K2) && !exists(&mut raw, "engine:18"));

    // AllBlocksCleared removes only that pod's entries; llm-d's entry on K1 stays.
    index.apply("pod-5", QWEN, &EventBatch { events: vec![KvEvent::AllBlocksCleared], ..EventBatch::default() }).await;
    assert_eq!(hgetall(&mut raw, K1), [(llm_d_field.to_string(), String::new())]);
    assert!(!exists(&mut raw, &k3));
}
