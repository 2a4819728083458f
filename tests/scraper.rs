//! The scraper against real HTTP servers: values land in the store, a dead endpoint and a
//! slow endpoint are marked failed and counted, and the service keeps routing.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn scraped_values_follow_the_server() {
    let pod = FakeVllm::start([127, 0, 0, 12], 3, 2, 0.25).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |_| {}).await;
    epp.wait_waiting(&[("pod", 3)]).await;
    let m = epp.app.store.snapshot().get("pod").unwrap().metrics.load_full();
    assert_eq!((m.metrics.running_requests, m.metrics.kv_cache_usage), (2, 0.25));
    pod.set(9, 1, 0.5);
    epp.wait_waiting(&[("pod", 9)]).await;
}

#[tokio::test]
async fn dead_and_slow_endpoints_are_marked_failed_and_counted() {
    let dead = std::net::TcpListener::bind("127.0.0.13:0").unwrap().local_addr().unwrap(); // closed on drop
    let slow_listener = tokio::net::TcpListener::bind("127.0.0.14:0").await.unwrap();
    let slow = slow_listener.local_addr().unwrap();
    // Accepts connections and never answers.
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..64 {
            let Ok((s, _)) = slow_listener.accept().await else { return };
            held.push(s);
        }
    });
    let ok = FakeVllm::start([127, 0, 0, 15], 0, 0, 0.0).await;
    let eps = endpoints_yaml(&[("dead", dead, &[]), ("slow", slow, &[]), ("ok", ok.addr, &[])]);
    let epp = TestEpp::start(&eps, None, |s| s.scrape_timeout = Duration::from_millis(100)).await;
    epp.wait_scraped(|set| {
        let failed = |n: &str| set.get(n).is_some_and(|e| e.metrics.load().last_scrape_failed);
        failed("dead") && failed("slow") && set.get("ok").is_some_and(|e| e.metrics.load().updated_at.is_some())
    })
    .await;
    let text = scrape(epp.app.metrics_addr).await;
    let errors: f64 = text
        .lines()
        .find(|l| l.starts_with("llm_d_epp_datalayer_poll_errors_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(errors >= 2.0, "poll errors counted: {errors}");
    // Still routing.
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    assert!(set_header(&ex.next().await, "x-gateway-destination-endpoint").is_some());
}
