//! The GIE conformance config end to end: `header-based-testing-filter` routes to the endpoint
//! the request names (and rejects requests naming none), `destination-endpoint-served-verifier`
//! echoes the gateway's served-endpoint metadata into `x-conformance-test-served-endpoint`.

mod common;

use common::*;
use epp::proto::envoy::config::core::v3::Metadata;
use prost_types::value::Kind;

const CONFIG: &str = include_str!("../deploy/configs/gie-conformance.yaml");

async fn two_pods() -> (FakeVllm, FakeVllm, TestEpp) {
    let a = FakeVllm::start([127, 0, 0, 21], 0, 0, 0.0).await;
    let b = FakeVllm::start([127, 0, 0, 22], 0, 0, 0.0).await;
    let eps = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[])]);
    let epp = TestEpp::start(&eps, Some(CONFIG), |_| {}).await;
    epp.wait_endpoints(&["a", "b"]).await;
    (a, b, epp)
}

fn served(mut msg: epp::proto::ext_proc::ProcessingRequest, endpoint: &str) -> epp::proto::ext_proc::ProcessingRequest {
    let value = prost_types::Value { kind: Some(Kind::StringValue(endpoint.into())) };
    let lb = prost_types::Struct { fields: [("x-gateway-destination-endpoint-served".to_string(), value)].into() };
    msg.metadata_context =
        Some(Metadata { filter_metadata: [("envoy.lb".to_string(), lb)].into(), ..Default::default() });
    msg
}

/// Sends a chat request (full duplex) naming `selection` (if any); returns the first reply.
async fn send_request(ex: &mut Exchange, selection: Option<&str>) -> epp::proto::ext_proc::ProcessingResponse {
    let extra: Vec<(&str, &str)> = selection.map(|s| ("test-epp-endpoint-selection", s)).into_iter().collect();
    ex.send(request_headers("/v1/chat/completions", &extra, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    ex.next().await
}

#[tokio::test]
async fn routes_to_the_selected_endpoint_and_echoes_the_served_one() {
    let (_a, b, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let selection = b.addr.ip().to_string();
    let reply = send_request(&mut ex, Some(&selection)).await;
    ex.next().await; // the request body reply
    assert_eq!(set_header(&reply, "x-gateway-destination-endpoint"), Some(b.addr.to_string()));
    ex.send(served(response_headers("200", "application/json"), "10.9.8.7:3000")).await;
    let reply = ex.next().await;
    assert_eq!(set_header(&reply, "x-conformance-test-served-endpoint").as_deref(), Some("10.9.8.7:3000"));
}

#[tokio::test]
async fn missing_served_metadata_is_reported_in_the_header() {
    let (a, _b, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    send_request(&mut ex, Some(&a.addr.to_string())).await;
    ex.next().await; // the request body reply
    ex.send(response_headers("200", "application/json")).await;
    let reply = ex.next().await;
    assert_eq!(
        set_header(&reply, "x-conformance-test-served-endpoint").as_deref(),
        Some("fail: missing envoy lb metadata")
    );
}

#[tokio::test]
async fn request_without_selection_is_rejected() {
    let (_a, _b, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let reply = send_request(&mut ex, None).await;
    assert!(immediate(&reply).is_some(), "no endpoint selected must fail the request: {reply:?}");
}
