//! The production prefill/decode config of the Korean KServe guide, routed end to end through
//! ext_proc: the destination is a decode endpoint, `x-prefiller-host-port` names a prefill
//! endpoint, incoming copies of the routing headers are replaced or removed, and the decision
//! is counted.

mod common;

use common::*;

const CONFIG: &str = include_str!("fixtures/configs/kserve-pd-glm.yaml");

#[tokio::test]
async fn production_pd_config_routes_to_decode_with_a_prefiller_header() {
    let prefill = FakeVllm::start([127, 0, 0, 41], 0, 0, 0.0).await;
    let decode = FakeVllm::start([127, 0, 0, 42], 0, 0, 0.0).await;
    let endpoints = endpoints_yaml(&[
        ("prefill-0", prefill.addr, &[("llm-d.ai/role", "prefill")]),
        ("decode-0", decode.addr, &[("llm-d.ai/role", "decode")]),
    ]);
    let epp = TestEpp::start(&endpoints, Some(CONFIG), |_| {}).await;
    epp.wait_endpoints(&["prefill-0", "decode-0"]).await;
    let mut client = epp.client().await;
    for round in 0..2 {
        let mut ex = Exchange::open(&mut client).await;
        let incoming = [("x-prefiller-host-port", "10.9.9.9:1"), ("x-encoder-hosts-ports", "10.9.9.9:2")];
        ex.send(request_headers("/v1/chat/completions", &incoming, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
        ex.send(request_body(&chat("zai-org/GLM-5.3", "hello prefill and decode", false), true)).await;
        let reply = ex.next().await;
        assert_eq!(
            set_header(&reply, "x-gateway-destination-endpoint"),
            Some(decode.addr.to_string()),
            "round {round}"
        );
        assert_eq!(metadata_destination(&reply), Some(decode.addr.to_string()));
        assert_eq!(set_header(&reply, "x-prefiller-host-port"), Some(prefill.addr.to_string()));
        assert_eq!(set_header(&reply, "x-encoder-hosts-ports"), None);
        assert!(removed_headers(&reply).iter().any(|h| h == "x-encoder-hosts-ports"), "{:?}", removed_headers(&reply));
        let _echoed_body = ex.next().await;
        ex.send(response_headers("200", "application/json")).await;
        let _ = ex.next().await;
        let usage = br#"{"id":"x","model":"zai-org/GLM-5.3","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
        ex.send(response_body(usage, true)).await;
        let _ = ex.next().await;
    }
    let metrics = scrape(epp.app.metrics_addr).await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("llm_d_epp_disagg_decision_total{") && l.contains("decision_type=\"prefill-decode\""))
        .unwrap_or_else(|| panic!("no decision series in:\n{metrics}"));
    assert!(line.contains("model_name=\"zai-org/GLM-5.3\"") && line.ends_with(" 2"), "{line}");
    assert!(metrics.contains("llm_d_inference_scheduler_disagg_decision_total{decision_type=\"prefill-decode\",model_name=\"zai-org/GLM-5.3\"} 2"));
}
