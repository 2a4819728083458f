//! `request-attribute-reporter` end to end: usage in the response body becomes dynamic
//! metadata on the final response message of a real ext_proc stream (buffered JSON and SSE),
//! a false condition or a response without usage produces none, and each outcome is counted.

mod common;

use common::*;
use epp::proto::ext_proc::ProcessingResponse;
use prost_types::value::Kind;

const CONFIG: &str = r#"
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: total
  type: request-attribute-reporter
  parameters:
    attributes:
    - key: {name: total_tokens}
      expression: usage.prompt_tokens + usage.completion_tokens
      condition: usage.completion_tokens > 0
- name: cached
  type: request-attribute-reporter
  parameters:
    attributes:
    - key: {namespace: billing, name: cached}
      expression: "has(usage.prompt_token_details) ? usage.prompt_token_details.cached_tokens : 0.0"
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
"#;

/// `namespace.key` of the reply's dynamic metadata, when set.
fn metadata_number(r: &ProcessingResponse, namespace: &str, key: &str) -> Option<f64> {
    let ns = r.dynamic_metadata.as_ref()?.fields.get(namespace)?;
    let Some(Kind::StructValue(s)) = &ns.kind else { return None };
    match s.fields.get(key)?.kind {
        Some(Kind::NumberValue(v)) => Some(v),
        _ => None,
    }
}

/// Runs one request through the stream up to the response headers, with `stream` selecting
/// SSE or JSON responses.
async fn open(epp: &TestEpp, stream: bool) -> Exchange {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", stream), true)).await;
    ex.take(2).await;
    let content_type = if stream { "text/event-stream" } else { "application/json" };
    ex.send(response_headers("200", content_type)).await;
    let headers_reply = ex.next().await;
    assert!(headers_reply.dynamic_metadata.is_none(), "no usage metadata on the response headers");
    ex
}

#[tokio::test]
async fn usage_becomes_dynamic_metadata_on_the_final_response_message() {
    let pod = FakeVllm::start([127, 0, 0, 61], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |_| {}).await;

    // Buffered JSON split over two messages: metadata only on the last reply.
    let mut ex = open(&epp, false).await;
    let json = br#"{"model":"m","usage":{"prompt_tokens":11,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#;
    let (a, b) = json.split_at(30);
    ex.send(response_body(a, false)).await;
    ex.send(response_body(b, true)).await;
    let last = ex.next().await;
    assert_eq!(streamed(&last), Some((json.to_vec(), true)));
    assert_eq!(metadata_number(&last, "envoy.lb", "total_tokens"), Some(16.0));
    assert_eq!(metadata_number(&last, "billing", "cached"), Some(4.0));

    // SSE: the chunk carrying end of stream gets the metadata; earlier chunks do not.
    let mut ex = open(&epp, true).await;
    let c1 = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n".to_vec();
    let c2 = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
    ex.send(response_body(&c1, false)).await;
    assert!(ex.next().await.dynamic_metadata.is_none());
    ex.send(response_body(c2, true)).await;
    let last = ex.next().await;
    assert_eq!(metadata_number(&last, "envoy.lb", "total_tokens"), Some(10.0));
    assert_eq!(metadata_number(&last, "billing", "cached"), None, "0 (no cached tokens) is not reported");
    assert!(last.dynamic_metadata.as_ref().is_some_and(|m| !m.fields.contains_key("billing")));
}

#[tokio::test]
async fn false_condition_or_missing_usage_produces_no_metadata() {
    let pod = FakeVllm::start([127, 0, 0, 62], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |_| {}).await;

    // completion_tokens == 0: the condition is false and nothing is cached -> no metadata.
    let mut ex = open(&epp, false).await;
    let json = br#"{"model":"m","usage":{"prompt_tokens":9,"completion_tokens":0}}"#;
    ex.send(response_body(json, true)).await;
    let last = ex.next().await;
    assert_eq!(streamed(&last), Some((json.to_vec(), true)));
    assert_eq!(last.dynamic_metadata, None);

    // No usage at all.
    let mut ex = open(&epp, false).await;
    ex.send(response_body(br#"{"model":"m","choices":[]}"#, true)).await;
    assert_eq!(ex.next().await.dynamic_metadata, None);

    let text = scrape(epp.app.metrics_addr).await;
    for line in [
        r#"epp_request_attribute_reports_total{outcome="condition_false",plugin_name="total"} 1"#,
        r#"epp_request_attribute_reports_total{outcome="no_usage",plugin_name="total"} 1"#,
        r#"epp_request_attribute_reports_total{outcome="zero",plugin_name="cached"} 1"#,
        r#"epp_request_attribute_reports_total{outcome="no_usage",plugin_name="cached"} 1"#,
        r#"epp_request_attribute_reports_total{outcome="reported",plugin_name="total"} 0"#,
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}

#[tokio::test]
async fn buffered_mode_and_trailers_carry_the_metadata_on_their_last_reply() {
    let pod = FakeVllm::start([127, 0, 0, 63], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |_| {}).await;
    let mut client = epp.client().await;

    // Buffered: one body reply per message; the end-of-stream one carries the metadata.
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/completions", &[], false, Some((BUFFERED, BUFFERED)))).await;
    ex.next().await;
    ex.send(request_body(br#"{"model":"m","prompt":"hi"}"#, true)).await;
    ex.next().await;
    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    ex.send(response_body(br#"{"model":"m","usage":{"prompt_tokens":2,"completion_tokens":1}}"#, true)).await;
    assert_eq!(metadata_number(&ex.next().await, "envoy.lb", "total_tokens"), Some(3.0));

    // SSE ending with trailers (gRPC/h2 backends): no chunk carries end of stream, so the
    // trailers reply is the final message.
    let mut ex = open(&epp, true).await;
    let chunk = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":4}}\n\n";
    ex.send(response_body(chunk, false)).await;
    assert!(ex.next().await.dynamic_metadata.is_none());
    ex.send(epp::proto::ext_proc::ProcessingRequest {
        request: Some(epp::proto::ext_proc::processing_request::Request::ResponseTrailers(Default::default())),
        ..Default::default()
    })
    .await;
    let trailers = ex.next().await;
    assert!(matches!(
        trailers.response,
        Some(epp::proto::ext_proc::processing_response::Response::ResponseTrailers(_))
    ));
    assert_eq!(metadata_number(&trailers, "envoy.lb", "total_tokens"), Some(8.0));
}
