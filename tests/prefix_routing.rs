//! Approximate prefix routing end to end: with equal load, a request sharing a long prompt
//! prefix with an earlier one goes to the endpoint that served the earlier one.

mod common;

use common::*;

#[tokio::test]
async fn shared_prefix_follows_the_first_pick() {
    let pods = [
        FakeVllm::start([127, 0, 0, 20], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 21], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, 22], 0, 0, 0.1).await,
    ];
    let eps = endpoints_yaml(&[("a", pods[0].addr, &[]), ("b", pods[1].addr, &[]), ("c", pods[2].addr, &[])]);
    let epp = TestEpp::start(&eps, None, |_| {}).await;
    epp.wait_waiting(&[("a", 0), ("b", 0), ("c", 0)]).await;
    let mut client = epp.client().await;
    let system = "You are a careful assistant. ".repeat(200);
    let route = |question: &str| {
        serde_json::to_vec(&serde_json::json!({
            "model": "m",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        }))
        .unwrap()
    };
    let mut destinations = Vec::new();
    for q in ["first question", "second question", "third question", "fourth question"] {
        let mut ex = Exchange::open(&mut client).await;
        ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
        ex.send(request_body(&route(q), true)).await;
        destinations.push(set_header(&ex.next().await, "x-gateway-destination-endpoint").unwrap());
    }
    assert!(destinations.iter().all(|d| d == &destinations[0]), "all follow the cached prefix: {destinations:?}");
    let text = scrape(epp.app.metrics_addr).await;
    assert!(text.contains("inference_extension_prefix_indexer_hit_ratio_count{plugin_name=\"approx-prefix-cache-producer\",plugin_type=\"approx-prefix-cache-producer\"} 4"));
}
