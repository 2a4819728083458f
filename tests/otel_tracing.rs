//! OpenTelemetry traces end to end: an in-process OTLP/gRPC receiver (a tonic server
//! implementing the collector's TraceService from opentelemetry-proto's generated types)
//! receives what a real epp exports through `opentelemetry-otlp` while a real ext_proc stream
//! routes one request carrying a W3C `traceparent`. The spans continue the gateway's trace,
//! nest as request -> parse / director -> tokenize, flow-control wait, schedule -> profile ->
//! plugins, and carry the model and the chosen endpoint.
//!
//! One test per binary: it installs the process-wide `tracing` subscriber.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use tokio::net::TcpListener;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// Collects every exported span.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    arrived: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        self.arrived.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        AnyValue::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    })
}

const CONFIG: &str = r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: token-producer
  parameters: {local: {models: {m: "TOKENIZER"}, timeout: 10s}}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer}
  - {pluginRef: max-score-picker}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_gateway_trace_and_name_the_chosen_endpoint() {
    let receiver = Receiver::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
    let collector = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let env: HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}")),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".to_string()),
        ("OTEL_TRACES_SAMPLER_ARG", "0".to_string()),
        ("OTEL_SERVICE_NAME", "epp-test".to_string()),
    ]
    .into();
    let lookup = |k: &str| env.get(k).cloned();
    assert_eq!(epp::telemetry::otel::export_plan(true, &lookup), epp::telemetry::otel::ExportPlan::Otlp);
    let provider = epp::telemetry::otel::otlp_provider(&lookup).expect("provider");
    let options = epp::telemetry::tracing::LogOptions {
        format: epp::telemetry::tracing::LogFormat::Json,
        level: "info",
        time_encoding: Default::default(),
    };
    epp::telemetry::tracing::init_with_spans(&options, Some(&provider));

    let pod = FakeVllm::start([127, 0, 0, 2], 0, 0, 0.1).await;
    let tokenizer = format!("{}/tests/fixtures/tokenizers/llama3", env!("CARGO_MANIFEST_DIR"));
    let epp = TestEpp::start(
        &endpoints_yaml(&[("pod", pod.addr, &[])]),
        Some(&CONFIG.replace("TOKENIZER", &tokenizer)),
        |_| {},
    )
    .await;
    epp.wait_endpoints(&["pod"]).await;
    epp.wait_scraped(|set| set.get("pod").is_some_and(|e| e.metrics.load().updated_at.is_some())).await;

    let mut client = epp.client().await;
    // Sampled by the gateway (flags 01): the ratio 0 applies to new traces only.
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[("traceparent", &traceparent)], false, Some((BUFFERED, NONE))))
        .await;
    assert!(is_request_headers(&ex.next().await));
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    // The stream's end closes the request span.
    assert!(ex.close_and_expect_end().await);
    // Not sampled (no parent, ratio 0): nothing of it may be exported.
    let mut unsampled = Exchange::open(&mut client).await;
    unsampled.send(request_headers("/v1/chat/completions", &[], false, Some((BUFFERED, NONE)))).await;
    assert!(is_request_headers(&unsampled.next().await));
    unsampled.send(request_body(&chat("m", "hello", false), true)).await;
    assert!(set_header(&unsampled.next().await, "x-gateway-destination-endpoint").is_some());
    assert!(unsampled.close_and_expect_end().await);
    // Not sampled by the gateway (flags 00): the parent-based sampler follows it.
    let declined = format!("00-{}-{PARENT_SPAN_ID}-00", "1".repeat(32));
    let mut unsampled = Exchange::open(&mut client).await;
    unsampled
        .send(request_headers("/v1/chat/completions", &[("traceparent", &declined)], false, Some((BUFFERED, NONE))))
        .await;
    assert!(is_request_headers(&unsampled.next().await));
    unsampled.send(request_body(&chat("m", "hello", false), true)).await;
    assert!(set_header(&unsampled.next().await, "x-gateway-destination-endpoint").is_some());
    assert!(unsampled.close_and_expect_end().await);

    let deadline = tokio::time::Instant::now() + WAIT;
    let spans = loop {
        let arrived = receiver.arrived.notified();
        let flusher = provider.clone();
        tokio::task::spawn_blocking(move || flusher.force_flush()).await.expect("flush task").expect("flush");
        let spans = receiver.spans.lock().unwrap().clone();
        if spans.iter().any(|s| s.name == "gateway.request") {
            break spans;
        }
        assert!(tokio::time::Instant::now() < deadline, "no gateway.request span exported: {spans:?}");
        let _ = tokio::time::timeout_at(deadline, arrived).await;
    };

    let by_name = |name: &str| -> &Span {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span; got {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()))
    };
    let request = by_name("gateway.request");
    assert_eq!(hex(&request.trace_id), TRACE_ID, "continues the gateway's trace");
    assert_eq!(hex(&request.parent_span_id), PARENT_SPAN_ID, "child of the gateway's span");
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(attribute(request, "gen_ai.request.model").as_deref(), Some("m"));
    assert_eq!(attribute(request, "gateway.target_pod.name").as_deref(), Some("pod"));
    assert!(attribute(request, "gateway.request.size_bytes").is_some());

    let child_of = |child: &str, parent: &Span| {
        let span = by_name(child);
        assert_eq!(span.parent_span_id, parent.span_id, "{child} is a child of {}", parent.name);
        assert_eq!(span.trace_id, parent.trace_id, "{child} is in the same trace");
        span
    };
    child_of("epp.parse_body", request);
    let director = child_of("gateway.director.handle_request", request);
    child_of("epp.tokenize", director);
    let wait = child_of("epp.flow_control.wait", director);
    assert!(attribute(wait, "gateway.admission.priority").is_some());
    let schedule = child_of("gateway.scheduler.schedule", director);
    assert_eq!(attribute(schedule, "gateway.scheduler.result").as_deref(), Some("scheduled"));
    assert_eq!(attribute(schedule, "gateway.target_pod.name").as_deref(), Some("pod"));
    assert_eq!(attribute(schedule, "gateway.scheduler.candidate_pods").as_deref(), Some("1"));
    let profile = child_of("run_scheduler_profile", schedule);
    assert_eq!(attribute(profile, "llm_d.epp.profile").as_deref(), Some("default"));
    child_of("llm_d.epp.scorer.queue-scorer", profile);
    child_of("llm_d.epp.picker.max-score-picker", profile);

    let traces: std::collections::BTreeSet<String> = spans.iter().map(|s| hex(&s.trace_id)).collect();
    assert_eq!(traces.into_iter().collect::<Vec<_>>(), [TRACE_ID], "the unsampled requests exported nothing");
    provider.shutdown().expect("shutdown");
}
