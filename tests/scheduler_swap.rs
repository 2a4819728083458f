//! The scheduler's swap point (`SchedulerHandle::replace`, the hook for config hot reload):
//! over real gRPC streams, a stream that started before a swap is scheduled and finished
//! (response hooks) by the scheduler it started with, while a stream that starts after the
//! swap uses the new one.

mod common;

use common::*;
use epp::framework::build::BuildContext;
use epp::scheduling::metrics::SchedulerMetrics;

#[tokio::test]
async fn streams_in_flight_finish_on_the_scheduler_they_started_with() {
    let a = FakeVllm::start([127, 0, 0, 41], 0, 0, 0.0).await;
    let b = FakeVllm::start([127, 0, 0, 42], 0, 0, 0.0).await;
    let endpoints = endpoints_yaml(&[("a", a.addr, &[("pool", "a")]), ("b", b.addr, &[("pool", "b")])]);
    let epp = TestEpp::start(&endpoints, Some(&pool_config("a", true)), |_| {}).await;
    epp.wait_endpoints(&["a", "b"]).await;
    let mut client = epp.client().await;

    // Stream 1 starts on the first scheduler (pool a, session tokens)...
    let mut old = Exchange::open(&mut client).await;
    old.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;

    // ...then the config changes: pool b, no session tokens.
    let cx = BuildContext { endpoints: epp.app.store.clone(), ..Default::default() };
    let loaded =
        epp::app::load_config(Some(&pool_config("b", false)), &cx, SchedulerMetrics::detached()).expect("loads");
    let previous = epp.app.scheduler().replace(loaded.scheduler);
    assert_eq!(previous.profiles().len(), 1, "the previous scheduler is handed back");

    // Stream 1's body arrives after the swap: still scheduled by the scheduler it started with.
    old.send(request_body(&chat("m", "hi", false), true)).await;
    // The headers reply, then the body echoed in one chunk.
    let replies = old.take(2).await;
    assert_eq!(set_header(&replies[0], "x-gateway-destination-endpoint"), Some(a.addr.to_string()));

    // A stream that starts now uses the new scheduler.
    let mut new = Exchange::open(&mut client).await;
    new.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    new.send(request_body(&chat("m", "hi", false), true)).await;
    let replies = new.take(2).await;
    assert_eq!(set_header(&replies[0], "x-gateway-destination-endpoint"), Some(b.addr.to_string()));

    // The response side runs each stream's own response hooks: only the old scheduler has the
    // session-affinity scorer that writes `x-session-token`.
    old.send(response_headers("200", "application/json")).await;
    new.send(response_headers("200", "application/json")).await;
    assert!(set_header(&old.next().await, "x-session-token").is_some(), "old stream, old hooks");
    assert_eq!(set_header(&new.next().await, "x-session-token"), None, "new stream, new hooks");
}
