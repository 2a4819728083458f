//! Hostile KV-event publishers (issue #11), over raw TCP with hand-written ZMTP 3.0 (greeting,
//! NULL mechanism, READY with Socket-Type PUB, frames), against the real subscriber: the
//! central bound socket and a pod-discovery connecting socket. A declared huge frame, a 9-byte
//! header as first frame, and endless MORE frames must drop only the offending connection,
//! count it, and leave honest publishers applied and new connections accepted.

mod common;

use std::time::Duration;

use common::kv::*;
use epp::kvcache::metrics::KvCacheMetrics;
use epp::kvcache::subscriber::{SubscriberConfig, SubscriberHandle, WireLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};
use zeromq::{PubSocket, Socket};

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(10);

/// ZMTP 3.0 greeting with the NULL mechanism.
fn greeting() -> Vec<u8> {
    let mut g = vec![0u8; 64];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// READY command announcing a PUB socket.
fn ready_pub() -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&3u32.to_be_bytes());
    body.extend_from_slice(b"PUB");
    let mut cmd = vec![0x04, u8::try_from(body.len()).expect("short")];
    cmd.extend_from_slice(&body);
    cmd
}

/// One message frame (short or long form).
fn frame(more: bool, body: &[u8]) -> Vec<u8> {
    let more = u8::from(more);
    let mut f = match u8::try_from(body.len()) {
        Ok(len) => vec![more, len],
        Err(_) => {
            let mut h = vec![more | 0x02];
            h.extend_from_slice(&(body.len() as u64).to_be_bytes());
            h
        }
    };
    f.extend_from_slice(body);
    f
}

/// A long frame header declaring `declared` bytes (the last frame of its message).
fn long_header(declared: u64) -> Vec<u8> {
    let mut h = vec![0x02];
    h.extend_from_slice(&declared.to_be_bytes());
    h
}

/// Greeting and READY: a peer that completed its side of the handshake.
fn handshake() -> Vec<u8> {
    let mut v = greeting();
    v.extend(ready_pub());
    v
}

/// Topic and sequence frames of a live message, MORE set.
fn topic_and_seq(seq: u64) -> Vec<u8> {
    let mut v = frame(true, TOPIC.as_bytes());
    v.extend(frame(true, &seq.to_be_bytes()));
    v
}

/// Reads until the other side closes the connection; panics after [`WAIT`].
async fn wait_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        match timeout(deadline.saturating_duration_since(Instant::now()), s.read(&mut buf)).await {
            Err(_) => panic!("epp kept the hostile connection open"),
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    }
}

/// Polls `cond` until it holds; panics after [`WAIT`].
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn rejected(m: &KvCacheMetrics, reason: &str) -> u64 {
    m.rejected_frames.with_label_values(&[reason]).get()
}

fn central_config() -> SubscriberConfig {
    SubscriberConfig {
        zmq_endpoint: Some("tcp://127.0.0.1:0".into()),
        discover_pods: false,
        concurrency: 1,
        ..SubscriberConfig::default()
    }
}

/// A real `zeromq` publisher connected to the central socket and seen by it.
async fn honest_publisher(h: &SubscriberHandle) -> PubSocket {
    let mut p = PubSocket::new();
    p.connect(h.central_endpoint().expect("bound")).await.expect("connect");
    warm_up(&mut p, h).await;
    p
}

/// Connects a raw peer to the central socket and completes the handshake.
async fn raw_peer(h: &SubscriberHandle) -> TcpStream {
    let addr = h.central_endpoint().expect("bound").trim_start_matches("tcp://").to_owned();
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(&handshake()).await.expect("handshake");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_huge_declared_frame_drops_only_that_peer() {
    let s = start(central_config(), source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let mut honest = honest_publisher(h).await;
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "first batch", || data_msgs(m) >= 1).await;

    // 2^63-1 aborted the process ("memory allocation of 9223372036854775807 bytes failed"); 64 GiB too.
    for (n, declared) in [(1, i64::MAX as u64), (2, 64u64 << 30)].into_iter() {
        let mut peer = raw_peer(h).await;
        let mut bytes = topic_and_seq(7);
        bytes.extend(long_header(declared));
        peer.write_all(&bytes).await.expect("write");
        wait_closed(&mut peer).await;
        eventually("rejection counted", || rejected(m, "frame_too_large") == n).await;
    }

    // The honest publisher on the same socket keeps being applied.
    publish(&mut honest, TOPIC, 1, payload(1)).await;
    publish(&mut honest, TOPIC, 2, payload(2)).await;
    wait_for(h, "later batches", || data_msgs(m) >= 3).await;
    let want = reference(&[payload(0), payload(1), payload(2)]);
    assert_eq!(s.index.lookup(&all_keys()), want.lookup(&all_keys()));
    assert_eq!(s.index.entries(), want.entries());
    assert_eq!(m.active_subscribers.get(), 1);
    assert_eq!(m.receiver_restarts.with_label_values(&["central", "panic"]).get(), 0);
    s.handle.shutdown().await;
    assert_eq!(m.active_subscribers.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_nine_byte_first_frame_keeps_intake_and_accepting() {
    let s = start(central_config(), source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    // The header as the peer's very first frame: a "capacity overflow" panic stopped all intake.
    for declared in [u64::MAX, i64::MAX as u64] {
        let mut peer = raw_peer(h).await;
        peer.write_all(&long_header(declared)).await.expect("write");
        wait_closed(&mut peer).await;
    }
    eventually("rejections counted", || rejected(m, "frame_too_large") == 2).await;

    // New connections are accepted and their events applied.
    let mut honest = honest_publisher(h).await;
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "batch after the attack", || s.index.entries() > 0).await;
    assert_eq!(blocks(&s.index), 3);
    assert_eq!(m.active_subscribers.get(), 1, "the gauge tells the truth");
    assert_eq!(m.peer_events.with_label_values(&["connected"]).get(), 3);
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_peer_stuck_in_the_handshake_is_dropped() {
    let limits = WireLimits { handshake_timeout: Duration::from_millis(300), ..WireLimits::default() };
    let s = start(SubscriberConfig { limits, ..central_config() }, source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let addr = h.central_endpoint().expect("bound").trim_start_matches("tcp://").to_owned();
    // Half a greeting, then silence: the connection would otherwise be held forever.
    let mut stuck = TcpStream::connect(addr).await.expect("connect");
    stuck.write_all(&greeting()[..10]).await.expect("write");
    wait_closed(&mut stuck).await;
    eventually("handshake failure counted", || m.zmq_errors.with_label_values(&["handshake"]).get() == 1).await;
    let mut honest = honest_publisher(h).await;
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "honest batch", || s.index.entries() > 0).await;
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_truncated_command_frame_drops_only_that_peer() {
    let s = start(central_config(), source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let mut honest = honest_publisher(h).await;
    // A command frame whose name length (5) runs past its 1-byte body: upstream indexed past the end.
    let mut peer = raw_peer(h).await;
    peer.write_all(&[0x04, 0x01, 0x05]).await.expect("write");
    wait_closed(&mut peer).await;
    eventually("receive error counted", || m.zmq_errors.with_label_values(&["recv"]).get() == 1).await;
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "honest batch", || s.index.entries() > 0).await;
    assert_eq!(m.active_subscribers.get(), 1);
    s.handle.shutdown().await;
}

/// Writes MORE frames of `frame_len` bytes until epp closes the connection; returns the bytes
/// written. Stops (and fails the caller's bound) after `cap` bytes.
async fn write_endless_message(peer: &mut TcpStream, frame_len: usize, cap: usize) -> usize {
    let chunk: Vec<u8> = frame(true, &vec![0x5a; frame_len]).repeat((64 * 1024 / (frame_len + 9)).max(1));
    let mut written = 0;
    while written < cap {
        match timeout(WAIT, peer.write_all(&chunk)).await {
            Ok(Ok(())) => written += chunk.len(),
            Ok(Err(_)) => return written,
            Err(_) => panic!("epp neither read nor closed the connection"),
        }
    }
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_endless_more_frames_are_cut_at_the_message_cap() {
    let limits = WireLimits {
        max_frame_bytes: 1 << 20,
        max_message_bytes: 1 << 20,
        max_frames_per_message: 64,
        ..WireLimits::default()
    };
    let s = start(SubscriberConfig { limits, ..central_config() }, source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let mut honest = honest_publisher(h).await;
    // The old decoder buffered all of it: 306 MB of MORE frames took RSS to 475 MB.
    let cap = 256 << 20;
    for (frame_len, reason) in [(0, "too_many_frames"), (60 * 1024, "message_too_large")] {
        let mut peer = raw_peer(h).await;
        let written = write_endless_message(&mut peer, frame_len, cap).await;
        // At most the cap plus what the loopback socket buffers held when epp hung up.
        assert!(written < 48 << 20, "{written} bytes accepted before the cut ({reason})");
        eventually("rejection counted", || rejected(m, reason) == 1).await;
    }
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "honest batch", || s.index.entries() > 0).await;
    assert_eq!(blocks(&s.index), 3);
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_discovery_hostile_publisher_is_dropped_then_reconnected() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dial = format!("tcp://{}", listener.local_addr().expect("addr"));
    let s = start(SubscriberConfig::default(), source(Some(dial))).await;
    let (h, m) = (&s.handle, &s.metrics);
    let accept = || async { timeout(WAIT, listener.accept()).await.expect("epp connects").expect("accept").0 };

    // A 9-byte header as the first frame, then a huge frame after topic and seq.
    let mut attacks = vec![long_header(u64::MAX), topic_and_seq(0)];
    attacks[1].extend(long_header(i64::MAX as u64));
    for (n, attack) in attacks.into_iter().enumerate() {
        let mut conn = accept().await;
        conn.write_all(&handshake()).await.expect("handshake");
        conn.write_all(&attack).await.expect("attack");
        wait_closed(&mut conn).await;
        eventually("rejection counted", || rejected(m, "frame_too_large") == n as u64 + 1).await;
    }

    // The endpoint's subscription recovers: epp reconnects and applies what it then receives.
    let mut conn = accept().await;
    let mut honest = handshake();
    honest.extend(topic_and_seq(0));
    honest.extend(frame(false, &payload(0)));
    conn.write_all(&honest).await.expect("write");
    wait_for(h, "batch after reconnection", || s.index.entries() > 0).await;
    assert_eq!(blocks(&s.index), 3);
    assert_eq!(m.active_subscribers.get(), 1);
    s.handle.shutdown().await;
    assert_eq!(m.active_subscribers.get(), 0);
}

/// Reads the first bytes epp sends on a raw connection: the server's greeting when the
/// connection was admitted, end of stream (or a reset) when it was closed on accept.
async fn admitted(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match timeout(WAIT, s.read(&mut buf)).await {
        Err(_) => panic!("epp neither greeted nor closed the connection"),
        Ok(Ok(n)) => n > 0,
        Ok(Err(_)) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_connections_over_the_cap_are_closed_and_counted() {
    const CAP: usize = 4;
    const EXTRA: usize = 6;
    let limits = WireLimits { max_connections: CAP, ..WireLimits::default() };
    let s = start(SubscriberConfig { limits, ..central_config() }, source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let limit_rejections = || m.connections_rejected.with_label_values(&["limit"]).get();
    let addr = h.central_endpoint().expect("bound").trim_start_matches("tcp://").to_owned();
    // The honest publisher holds one slot; raw peers fill the rest, then overflow.
    let mut honest = honest_publisher(h).await;
    let mut held = Vec::new();
    for i in 0..CAP - 1 + EXTRA {
        let mut peer = TcpStream::connect(&addr).await.expect("connect");
        let expected = i < CAP - 1;
        assert_eq!(admitted(&mut peer).await, expected, "connection {i} of cap {CAP}");
        if expected {
            peer.write_all(&handshake()).await.expect("handshake");
            held.push(peer);
        }
    }
    assert_eq!(limit_rejections(), EXTRA as u64);
    // The publisher that was there first is undisturbed.
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "honest batch at the cap", || s.index.entries() > 0).await;
    assert_eq!(blocks(&s.index), 3);

    // A slot frees when its peer leaves: a new connection is admitted again.
    drop(held.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut peer = TcpStream::connect(&addr).await.expect("connect");
        if admitted(&mut peer).await {
            held.push(peer);
            break;
        }
        assert!(Instant::now() < deadline, "the slot of a closed connection was never released");
        tokio::task::yield_now().await;
    }
    assert!(limit_rejections() >= EXTRA as u64);
    assert_eq!(m.active_subscribers.get(), 1);
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_timeout_from_the_config_closes_a_silent_peer() {
    use epp::plugins::producer::precise_prefix::params::Params;
    let yaml = "kvEventsConfig: {zmqEndpoint: 'tcp://127.0.0.1:0', discoverPods: false, handshakeTimeout: 300ms}";
    let params: Params = serde_yaml::from_str(yaml).expect("parses");
    let cfg = params.derive().expect("derives").subscriber;
    assert_eq!(cfg.limits.handshake_timeout, Duration::from_millis(300));
    let s = start(SubscriberConfig { concurrency: 1, ..cfg }, source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let addr = h.central_endpoint().expect("bound").trim_start_matches("tcp://").to_owned();
    // Connects and never sends a byte.
    let opened = Instant::now();
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    wait_closed(&mut silent).await;
    let held = opened.elapsed();
    // Closed by the configured 300 ms, not the 10 s default (nor at once).
    assert!(held >= Duration::from_millis(300) && held < Duration::from_secs(5), "held {held:?}");
    eventually("handshake failure counted", || m.zmq_errors.with_label_values(&["handshake"]).get() == 1).await;
    let mut honest = honest_publisher(h).await;
    publish(&mut honest, TOPIC, 0, payload(0)).await;
    wait_for(h, "honest batch", || s.index.entries() > 0).await;
    s.handle.shutdown().await;
}
