//! Active-active replicas sharing state through a real redis-server (docs/replicas.md): two
//! in-process epp servers with `--replica-sync-url` behind a round-robin client, four equal
//! fake pods. Waits are barriers (the replica's applied-update counter, redis-server's ready
//! line) bounded by `WAIT`; nothing sleeps.

mod common;

use std::time::Duration;

use common::redis_server::RedisServer;
use common::replica::{metric, received, route_on, turn};
use common::*;
use epp::replica::SyncSettings;
use epp::replica::applier::AppliedCounts;

const APPROX: &str = "approx-prefix-cache-producer";

async fn pods() -> (Vec<FakeVllm>, String) {
    let mut pods = Vec::new();
    for i in 0..4u8 {
        pods.push(FakeVllm::start([127, 0, 0, 30 + i], 0, 0, 0.1).await);
    }
    let names = ["pod-0", "pod-1", "pod-2", "pod-3"];
    let specs: Vec<EndpointSpec<'_>> = names.iter().zip(&pods).map(|(n, p)| (*n, p.addr, &[][..])).collect();
    let eps = endpoints_yaml(&specs);
    (pods, eps)
}

async fn replica(eps: &str, url: &str, config: Option<&str>) -> TestEpp {
    replica_beating(eps, url, config, Duration::from_secs(1)).await
}

/// A replica whose heartbeat (liveness and in-flight totals) runs every `heartbeat`.
async fn replica_beating(eps: &str, url: &str, config: Option<&str>, heartbeat: Duration) -> TestEpp {
    let settings = SyncSettings { key: "test:sync".into(), heartbeat, ..SyncSettings::new(url) };
    let epp = TestEpp::start(eps, config, |s| s.replica_sync = Some(settings)).await;
    epp.wait_waiting(&[("pod-0", 0), ("pod-1", 0), ("pod-2", 0), ("pod-3", 0)]).await;
    epp
}

/// Waits until `epp` has applied remote updates satisfying `check`.
async fn wait_applied(epp: &TestEpp, check: impl Fn(&AppliedCounts) -> bool) {
    let mut applied = epp.app.replica_sync.as_ref().expect("sync on").applied();
    let ok = matches!(tokio::time::timeout(WAIT, applied.wait_for(|c| check(c))).await, Ok(Ok(_)));
    assert!(ok, "updates not applied within {WAIT:?}: {:?}", *applied.borrow());
}

fn applied(epp: &TestEpp) -> AppliedCounts {
    *epp.app.replica_sync.as_ref().expect("sync on").applied().borrow()
}

/// Waits until `epp` applied two more heartbeats of its peer: the stream is ordered, so every
/// update the peer queued before the second one (enqueued after this call) was applied.
async fn wait_for_peer_updates(epp: &TestEpp) {
    let before = applied(epp).heartbeats;
    wait_applied(epp, |a| a.heartbeats >= before + 2).await;
}

/// Two replicas on a 200 ms heartbeat that have already shared one prefix entry.
async fn sharing_pair(eps: &str, url: &str) -> [TestEpp; 2] {
    let beat = Duration::from_millis(200);
    let replicas = [replica_beating(eps, url, None, beat).await, replica_beating(eps, url, None, beat).await];
    route(&replicas[0], &turn(0, false), &[]).await;
    wait_applied(&replicas[1], |a| a.prefix >= 1).await;
    replicas
}

/// Routes one chat request through `epp` (full duplex) and returns the destination.
async fn route(epp: &TestEpp, body: &[u8], headers: &[(&str, &str)]) -> String {
    route_on(&mut epp.client().await, body, headers).await
}

/// The issue's case: every follow-up reaches the other replica; with sync all 12 land on the
/// pod of their first turn (without it, each has a 1 in 4 chance: the control below).
#[tokio::test]
async fn follow_up_turns_go_to_the_first_turns_pod_whichever_replica_gets_them() {
    let redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    let unsynced = [TestEpp::start(&eps, None, |_| {}).await, TestEpp::start(&eps, None, |_| {}).await];
    let mut kept_unsynced = 0;
    for c in 0..12 {
        let pod = route(&unsynced[c % 2], &turn(c, false), &[]).await;
        kept_unsynced += usize::from(route(&unsynced[(c + 1) % 2], &turn(c, true), &[]).await == pod);
    }
    assert!(kept_unsynced < 12, "control: replicas without sync do not agree");
    let replicas = [replica(&eps, &redis.url(), None).await, replica(&eps, &redis.url(), None).await];
    let mut kept = 0;
    // Decisions per replica: each publishes one prefix update.
    let mut decisions = [0u64; 2];
    for c in 0..12 {
        // Round robin: turn 1 on one replica, the follow-up on the other.
        let (first, second) = (c % 2, (c + 1) % 2);
        let pod = route(&replicas[first], &turn(c, false), &[]).await;
        decisions[first] += 1;
        wait_applied(&replicas[second], |a| a.prefix >= decisions[first]).await;
        kept += usize::from(route(&replicas[second], &turn(c, true), &[]).await == pod);
        decisions[second] += 1;
    }
    assert_eq!(kept, 12, "follow-ups routed to their first turn's pod");
    let text = scrape(replicas[0].app.metrics_addr).await;
    assert!(metric(&text, "epp_replica_sync_messages_sent_total") >= 6.0);
    assert!(metric(&text, "epp_replica_sync_messages_received_total{outcome=\"applied\"}") >= 6.0);
    assert!(metric(&text, "epp_replica_sync_lag_seconds_count") >= 6.0);
    assert_eq!(metric(&text, "epp_replica_sync_connected"), 1.0);
}

/// redis-server killed mid-run: every request is still routed; after a restart on the same
/// port both replicas reconnect, resync and share again.
#[tokio::test]
async fn redis_killed_and_restarted_mid_run() {
    let mut redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    let replicas = sharing_pair(&eps, &redis.url()).await;

    redis.kill();
    for c in 1..21 {
        route(&replicas[c % 2], &turn(c, false), &[]).await;
    }
    redis.restart();

    let pod = route(&replicas[0], &turn(100, false), &[]).await;
    wait_for_peer_updates(&replicas[1]).await;
    assert_eq!(route(&replicas[1], &turn(100, true), &[]).await, pod, "affinity is back after the restart");
    for epp in &replicas {
        let text = scrape(epp.app.metrics_addr).await;
        assert!(metric(&text, "epp_replica_sync_resyncs_total") >= 2.0, "start and reconnect");
    }
    let text = scrape(replicas[0].app.metrics_addr).await;
    assert!(metric(&text, "epp_replica_sync_outages_total") >= 1.0);
}

/// A frozen Redis (SIGSTOP: connections open, nothing answered) never delays a decision;
/// after it resumes, updates flow again.
#[tokio::test]
async fn a_frozen_redis_never_delays_a_decision() {
    let redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    let replicas = sharing_pair(&eps, &redis.url()).await;

    redis.freeze();
    let mut slowest = Duration::ZERO;
    for c in 1..41 {
        let started = tokio::time::Instant::now();
        route(&replicas[c % 2], &turn(c, false), &[]).await;
        slowest = slowest.max(started.elapsed());
    }
    // Redis calls time out after 2 s; a decision that waited on one would take that long.
    assert!(slowest < Duration::from_secs(1), "a decision waited on Redis: {slowest:?}");
    redis.thaw();

    let pod = route(&replicas[0], &turn(100, false), &[]).await;
    wait_for_peer_updates(&replicas[1]).await;
    assert_eq!(route(&replicas[1], &turn(100, true), &[]).await, pod);
}

/// A slow Redis (every byte to and from it 300 ms late, through a delaying proxy: answers
/// come, but each round trip takes 600 ms) never delays a decision, and the replicas still
/// converge: updates arrive late, not never.
#[tokio::test]
async fn a_slow_redis_never_delays_a_decision_and_updates_still_arrive() {
    let redis = RedisServer::start();
    let delay = Duration::from_millis(300);
    let proxy = common::delay_proxy::DelayProxy::start(([127, 0, 0, 1], redis.port).into(), delay).await;
    let (_pods, eps) = pods().await;
    let url = format!("redis://{}", proxy.addr);
    let replicas = sharing_pair(&eps, &url).await;

    let mut slowest = Duration::ZERO;
    for c in 1..41 {
        let started = tokio::time::Instant::now();
        route(&replicas[c % 2], &turn(c, false), &[]).await;
        slowest = slowest.max(started.elapsed());
    }
    // One Redis round trip takes 2 x 300 ms; a decision that waited on one would take that long.
    assert!(slowest < delay, "a decision waited on Redis: {slowest:?}");

    // Replica 0 has made 22 decisions (1 in `sharing_pair`, 20 above, this one), one
    // prefix update each; several heartbeats are in flight on the slow path, so wait for
    // the updates themselves.
    let pod = route(&replicas[0], &turn(100, false), &[]).await;
    wait_applied(&replicas[1], |a| a.prefix >= 22).await;
    assert_eq!(route(&replicas[1], &turn(100, true), &[]).await, pod, "the slow path still converged");
    let text = scrape(replicas[1].app.metrics_addr).await;
    let lag = metric(&text, "epp_replica_sync_lag_seconds_sum") / metric(&text, "epp_replica_sync_lag_seconds_count");
    assert!(lag >= delay.as_secs_f64(), "the lag shows the slow path: mean {lag} s");
}

/// Garbage, foreign versions, entries without the message field and updates for unknown
/// plugins are counted and skipped; the valid update after them is applied.
#[tokio::test]
async fn malformed_and_foreign_messages_are_counted_and_ignored() {
    use epp::framework::replica::SharedUpdate;
    use epp::replica::wire::{Body, Message, encode};

    let redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    let epp = replica(&eps, &redis.url(), None).await;
    let client = redis::Client::open(redis.url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let message = |plugin: &str| Message {
        replica: "someone-else".into(),
        published_ms: epp::replica::applier::now_ms(),
        plugin: plugin.into(),
        body: Body::Update(SharedUpdate::PrefixRecorded { endpoint: "pod-0".into(), keys: vec![1, 2, 3].into() }),
    };
    let entries: Vec<(&str, Vec<u8>)> = vec![
        ("m", vec![2, 200, 7]),
        ("m", vec![9, 0, 0, 0]),
        ("other", b"hello".to_vec()),
        ("m", encode(&[message("no-such-plugin")])),
        ("m", encode(&[message(APPROX)])),
    ];
    for (field, value) in entries {
        let _: String = redis::cmd("XADD")
            .arg("test:sync")
            .arg("*")
            .arg(field)
            .arg(value)
            .query_async(&mut conn)
            .await
            .expect("XADD");
    }
    wait_applied(&epp, |a| a.prefix >= 1).await;
    let text = scrape(epp.app.metrics_addr).await;
    assert_eq!(received(&text, "malformed"), 2.0);
    assert_eq!(received(&text, "foreign_version"), 1.0);
    assert_eq!(received(&text, "unknown_plugin"), 1.0);
    route(&epp, &turn(0, false), &[]).await;
}

/// A page of peers' entries is applied one entry at a time with the other tasks of the
/// worker running in between (a decision waits for one entry, not for the page): an observer
/// on the same single-threaded runtime sees the applied count step through the entries.
#[tokio::test]
async fn a_page_of_peer_entries_lets_other_tasks_run_between_entries() {
    use epp::framework::replica::SharedUpdate;
    use epp::replica::wire::{Body, Message, encode};

    const ENTRIES: u64 = 20;
    let redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    let epp = replica(&eps, &redis.url(), None).await;
    let mut applied = epp.app.replica_sync.as_ref().expect("sync on").applied();
    let start = applied.borrow_and_update().prefix;
    let client = redis::Client::open(redis.url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    // One transaction: the reader's blocked XREAD returns all entries in one page.
    let mut pipe = redis::pipe();
    pipe.atomic();
    for i in 0..ENTRIES {
        let message = Message {
            replica: "someone-else".into(),
            published_ms: epp::replica::applier::now_ms(),
            plugin: APPROX.into(),
            body: Body::Update(SharedUpdate::PrefixRecorded { endpoint: "pod-0".into(), keys: vec![i + 1].into() }),
        };
        pipe.cmd("XADD").arg("test:sync").arg("*").arg("m").arg(encode(&[message])).ignore();
    }
    let () = pipe.query_async(&mut conn).await.expect("MULTI XADD");
    let mut seen = Vec::new();
    let observe = async {
        while seen.last().is_none_or(|n| *n < start + ENTRIES) {
            applied.changed().await.expect("sync running");
            seen.push(applied.borrow_and_update().prefix);
        }
    };
    let done = tokio::time::timeout(WAIT, observe).await.is_ok();
    assert!(done, "entries not applied within {WAIT:?}: {seen:?}");
    assert!(seen.len() as u64 > ENTRIES / 2, "the page was applied in one go: {seen:?}");
}

/// Session bindings (`session_id` strategy) and in-flight load are shared: a session bound on
/// one replica is honoured by the other, and requests held open through one replica steer
/// the other's load scorer away from their pod.
#[tokio::test]
async fn session_bindings_and_in_flight_load_are_shared() {
    const CONFIG: &str = r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: session-affinity-scorer
  parameters: {strategy: session_id}
- type: inflight-load-producer
- type: active-request-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: session-affinity-scorer
    weight: 10
  - pluginRef: active-request-scorer
    weight: 1
"#;
    let redis = RedisServer::start();
    let (_pods, eps) = pods().await;
    // One heartbeat (at start) in the test's time, so the in-flight updates can be counted.
    let hour = Duration::from_secs(3600);
    let replicas = [
        replica_beating(&eps, &redis.url(), Some(CONFIG), hour).await,
        replica_beating(&eps, &redis.url(), Some(CONFIG), hour).await,
    ];
    // Decisions per replica: each binds (and publishes) its session.
    let mut binds = [0u64; 2];
    for s in 0..6 {
        let session = format!("chat-{s}");
        let headers = [("x-session-id", session.as_str())];
        let (first, second) = (s % 2, (s + 1) % 2);
        let pod = route(&replicas[first], &chat("m", "hello", false), &headers).await;
        binds[first] += 1;
        wait_applied(&replicas[second], |a| a.sessions >= binds[first]).await;
        assert_eq!(route(&replicas[second], &chat("m", "again", false), &headers).await, pod, "session {session}");
        binds[second] += 1;
    }

    // Three requests held open through replica 0 (on three pods: its own scorer spreads
    // them); replica 1 then sees them in flight and picks the idle pod.
    let mut client = replicas[0].client().await;
    let mut open = Vec::new();
    let mut busy = Vec::new();
    for _ in 0..3 {
        let mut ex = Exchange::open(&mut client).await;
        ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
        ex.send(request_body(&chat("m", "long job", false), true)).await;
        busy.push(set_header(&ex.next().await, "x-gateway-destination-endpoint").expect("destination"));
        open.push(ex);
    }
    // Replica 0's start-up totals, +1 and -1 for each of its 6 finished session requests, +1
    // for each held one.
    wait_applied(&replicas[1], |a| a.inflight >= 1 + 12 + 3).await;
    let pod = route(&replicas[1], &chat("m", "short job", false), &[]).await;
    assert!(!busy.contains(&pod), "replica 1 counted replica 0's in-flight requests: {pod} in {busy:?}");
}

/// A URL with a scheme that is neither Redis nor Valkey stops the start with a clear error.
#[tokio::test]
async fn a_bad_sync_url_fails_the_start() {
    let mut settings = epp::app::Settings::loopback();
    settings.replica_sync = Some(SyncSettings::new("http://user:secret@cache:6379"));
    let error = epp::app::App::start(settings).await.expect_err("refused").to_string();
    assert!(error.contains("unsupported scheme") && !error.contains("secret"), "{error}");
}
