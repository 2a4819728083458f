//! KV-event test helpers: recorded vLLM payloads, a request-key index, a real subscriber on
//! loopback, `zeromq` publishing, and flush-barrier waits.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use epp::kvcache::decode::decode_batch;
use epp::kvcache::events::KvEvent;
use epp::kvcache::index::{IndexConfig, KeyMode, PrefixIndex};
use epp::kvcache::keys::{RequestKeyer, request_keys};
use epp::kvcache::metrics::KvCacheMetrics;
use epp::kvcache::subscriber::{KvEventSource, Subscriber, SubscriberConfig, SubscriberHandle};
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use zeromq::{PubSocket, SocketSend, ZmqMessage};

/// Topic of `pod-a` (127.0.0.1:8000) serving model `m`.
pub const TOPIC: &str = "kv@127.0.0.1:8000@m";

/// Recorded vLLM payload `i` (0: prefill, 1: decode continuation, 2: evictions).
pub fn payload(i: usize) -> Bytes {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/kv_events/zmq/capture_payload_{i}.bin"));
    Bytes::from(std::fs::read(p).expect("fixture"))
}

fn tokens(p: &Bytes) -> Vec<u32> {
    decode_batch(p)
        .expect("decodes")
        .events
        .into_iter()
        .filter_map(|e| match e {
            KvEvent::BlockStored(s) => Some(s.token_ids),
            _ => None,
        })
        .flatten()
        .collect()
}

/// An empty request-key index (block size 16).
pub fn index() -> Arc<PrefixIndex> {
    Arc::new(PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 16 },
        ..IndexConfig::default()
    }))
}

/// The index that applying `payloads` directly would give.
pub fn reference(payloads: &[Bytes]) -> Arc<PrefixIndex> {
    let idx = index();
    for p in payloads {
        idx.apply("pod-a", "m", &decode_batch(p).expect("decodes"));
    }
    idx
}

/// Request keys of every token stored by payloads 0 and 1.
pub fn all_keys() -> Vec<u64> {
    let mut t = tokens(&payload(0));
    t.extend(tokens(&payload(1)));
    request_keys("m", None, &t, 16)
}

/// Longest prefix (in blocks) of [`all_keys`] held by the best endpoint.
pub fn blocks(idx: &PrefixIndex) -> usize {
    idx.lookup(&all_keys()).first().map_or(0, |m| m.blocks)
}

/// `pod-a` at 127.0.0.1:8000, optionally with an explicit publisher endpoint.
pub fn source(kv_events_endpoint: Option<String>) -> KvEventSource {
    KvEventSource {
        name: "pod-a".into(),
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 8000,
        rank: 0,
        kv_events_endpoint,
    }
}

/// A multipart message.
pub fn msg(frames: Vec<Bytes>) -> ZmqMessage {
    ZmqMessage::try_from(frames).expect("non-empty")
}

/// Publishes one live message `[topic, seq, payload]`.
pub async fn publish(s: &mut PubSocket, topic: &str, seq: u64, p: Bytes) {
    s.send(msg(vec![Bytes::from(topic.to_owned()), Bytes::copy_from_slice(&seq.to_be_bytes()), p]))
        .await
        .expect("send");
}

/// Sends malformed 2-frame probes until the subscriber has received more than it had (slow joiner).
pub async fn warm_up(s: &mut PubSocket, h: &SubscriberHandle) {
    let seen = h.received();
    for _ in 0..200 {
        s.send(msg(vec![Bytes::from_static(b"kv@probe"), Bytes::from_static(b"x")])).await.expect("send");
        if timeout(Duration::from_millis(50), h.wait_received(seen + 1)).await.is_ok() {
            return;
        }
    }
    panic!("subscriber never received a probe");
}

/// Waits (bounded) until `cond` holds after a flush.
pub async fn wait_for(h: &SubscriberHandle, what: &str, cond: impl Fn() -> bool) {
    for _ in 0..100 {
        h.flush().await;
        if cond() {
            // Everything that arrived before `cond` held is applied after this.
            h.flush().await;
            return;
        }
        let seen = h.received();
        let _ = timeout(Duration::from_millis(50), h.wait_received(seen + 1)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Messages that had a valid frame layout.
pub fn data_msgs(m: &KvCacheMetrics) -> u64 {
    m.messages_received.get() - m.malformed_messages.get()
}

/// A running subscriber and what it writes to.
pub struct Setup {
    pub index: Arc<PrefixIndex>,
    pub metrics: Arc<KvCacheMetrics>,
    pub handle: SubscriberHandle,
    pub sources: watch::Sender<Vec<KvEventSource>>,
    pub cancel: CancellationToken,
}

/// Starts a subscriber with `cfg` following the one endpoint `src`.
pub async fn start(cfg: SubscriberConfig, src: KvEventSource) -> Setup {
    let index = index();
    let metrics = Arc::new(KvCacheMetrics::register(&prometheus::Registry::new()).expect("metrics"));
    let (sources, rx) = watch::channel(vec![src]);
    let cancel = CancellationToken::new();
    let handle = Subscriber::spawn(cfg, index.clone(), metrics.clone(), None, rx, cancel.clone()).await.expect("spawn");
    Setup { index, metrics, handle, sources, cancel }
}
