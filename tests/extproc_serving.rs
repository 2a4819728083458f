//! Serving surface: TLS on and off, gRPC health, the admin server, and the response path
//! (headers, streamed and buffered bodies, trailers, usage metrics).

mod common;

use common::*;
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp::proto::ext_proc::processing_response::Response;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn one_pod() -> (FakeVllm, TestEpp) {
    let pod = FakeVllm::start([127, 0, 0, 8], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |_| {}).await;
    (pod, epp)
}

#[tokio::test]
async fn tls_with_cert_path_serves_ext_proc() {
    let pod = FakeVllm::start([127, 0, 0, 9], 0, 0, 0.0).await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = epp::tls::self_signed().unwrap();
    std::fs::write(certs.path().join("tls.crt"), &cert).unwrap();
    std::fs::write(certs.path().join("tls.key"), &key).unwrap();
    let dir = certs.path().to_path_buf();
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, move |s| {
        s.secure_serving = true;
        s.cert_path = Some(dir);
    })
    .await;
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(cert)).domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", epp.app.grpc_addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS handshake");
    let mut client = ExternalProcessorClient::new(channel);
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));

    let plain = ExternalProcessorClient::connect(format!("http://{}", epp.app.grpc_addr)).await;
    let refused = match plain {
        Err(_) => true,
        Ok(mut c) => {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            drop(tx);
            c.process(tokio_stream::wrappers::ReceiverStream::new(rx)).await.is_err()
        }
    };
    assert!(refused, "plaintext h2c is refused when TLS is on");
}

#[tokio::test]
async fn self_signed_tls_when_no_cert_path() {
    let pod = FakeVllm::start([127, 0, 0, 10], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |s| s.secure_serving = true).await;
    // The generated certificate is unknown to the client: the handshake must fail on
    // verification (proving TLS is served), not on the connection.
    let tls = ClientTlsConfig::new().domain_name("localhost");
    let err = Channel::from_shared(format!("https://{}", epp.app.grpc_addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await;
    let message = format!("{:?}", err.expect_err("unverifiable certificate"));
    assert!(
        message.to_lowercase().contains("certificate")
            || message.contains("InvalidCertificate")
            || message.contains("UnknownIssuer"),
        "{message}"
    );
}

#[tokio::test]
async fn health_reports_serving_for_every_service_name() {
    let (_pod, epp) = one_pod().await;
    let mut health = HealthClient::new(
        Channel::from_shared(format!("http://{}", epp.app.health_addr)).unwrap().connect().await.unwrap(),
    );
    for name in ["", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"] {
        let status = health.check(HealthCheckRequest { service: name.into() }).await.unwrap().into_inner().status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {name:?}");
    }
    let unknown = health.check(HealthCheckRequest { service: "nope".into() }).await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn health_checking_flag_adds_health_on_the_ext_proc_port() {
    let pod = FakeVllm::start([127, 0, 0, 11], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |s| s.health_checking = true).await;
    let mut health = HealthClient::new(
        Channel::from_shared(format!("http://{}", epp.app.grpc_addr)).unwrap().connect().await.unwrap(),
    );
    let status = health
        .check(HealthCheckRequest { service: "envoy.service.ext_proc.v3.ExternalProcessor".into() })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
}

#[tokio::test]
async fn metrics_endpoint_exposes_request_and_scheduler_series() {
    let (_pod, epp) = one_pod().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    ex.take(2).await;
    let text = scrape(epp.app.metrics_addr).await;
    for name in [
        "inference_objective_request_total{model_name=\"m\",target_model_name=\"m\"} 1",
        "llm_d_epp_request_total{model_name=\"m\",target_model_name=\"m\"} 1",
        "inference_extension_scheduler_e2e_duration_seconds_count 1",
        "inference_extension_plugin_duration_seconds_count{extension_point=\"Scorer\",plugin_name=\"queue-scorer\",plugin_type=\"queue-scorer\"} 1",
        "inference_extension_info",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
}

#[tokio::test]
async fn response_path_echoes_in_order_and_counts_usage() {
    let (_pod, epp) = one_pod().await;
    let mut client = epp.client().await;

    // Streaming (SSE): chunks echoed one for one.
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", true), true)).await;
    ex.take(2).await;
    ex.send(response_headers("200", "text/event-stream")).await;
    let r = ex.next().await;
    assert!(matches!(r.response, Some(Response::ResponseHeaders(_))));
    assert_eq!(set_header(&r, "x-went-into-resp-headers").as_deref(), Some("true"));
    let c1 = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n".to_vec();
    let c2 =
        b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n".to_vec();
    ex.send(response_body(&c1, false)).await;
    assert_eq!(streamed(&ex.next().await), Some((c1, false)));
    ex.send(response_body(&c2, true)).await;
    assert_eq!(streamed(&ex.next().await), Some((c2, true)));

    // Non-streaming JSON: buffered, then echoed with end of stream on the last chunk.
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    ex.take(2).await;
    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    let json = br#"{"id":"x","model":"m","usage":{"prompt_tokens":11,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#;
    let (a, b) = json.split_at(20);
    ex.send(response_body(a, false)).await;
    ex.send(response_body(b, true)).await;
    assert_eq!(
        streamed(&ex.next().await),
        Some((json.to_vec(), true)),
        "nothing sent before the end, then the whole body"
    );
    ex.send(epp_trailers()).await;
    assert!(matches!(ex.next().await.response, Some(Response::ResponseTrailers(_))));
    drop(ex);

    // Usage from both responses reached the token histograms (7 + 11 prompt tokens).
    let text = scrape(epp.app.metrics_addr).await;
    assert!(
        text.contains("inference_objective_input_tokens_sum{model_name=\"m\",target_model_name=\"m\"} 18"),
        "{text}"
    );
    assert!(text.contains("inference_objective_output_tokens_sum{model_name=\"m\",target_model_name=\"m\"} 8"));
    assert!(text.contains("inference_objective_prompt_cached_tokens_sum{model_name=\"m\",target_model_name=\"m\"} 4"));
}

#[tokio::test]
async fn rewritten_model_name_is_restored_in_responses() {
    let (_pod, epp) = one_pod().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers(
        "/v1/chat/completions",
        &[("x-gateway-model-name-rewrite", "real")],
        false,
        Some((FULL_DUPLEX, FULL_DUPLEX)),
    ))
    .await;
    ex.send(request_body(&chat("alias", "hi", false), true)).await;
    ex.take(2).await;
    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    ex.send(response_body(br#"{"id":"1","model":"real","choices":[]}"#, true)).await;
    let (body, eos) = streamed(&ex.next().await).unwrap();
    assert!(eos);
    assert_eq!(body, br#"{"id":"1","model":"alias","choices":[]}"#.to_vec());
}

#[tokio::test]
async fn buffered_response_mode_answers_each_message() {
    let (_pod, epp) = one_pod().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers(
        "/v1/completions",
        &[("x-gateway-model-name-rewrite", "real")],
        false,
        Some((BUFFERED, BUFFERED)),
    ))
    .await;
    ex.next().await;
    ex.send(request_body(br#"{"model":"alias","prompt":"hi"}"#, true)).await;
    let routed = ex.next().await;
    assert_eq!(
        replaced_body(&routed),
        Some(br#"{"model":"real","prompt":"hi"}"#.to_vec()),
        "buffered rewrite uses a body mutation"
    );
    assert_eq!(set_header(&routed, "content-length"), Some("30".into()));
    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    ex.send(response_body(br#"{"model":"real","usage":{"prompt_tokens":2,"completion_tokens":1}}"#, true)).await;
    assert_eq!(
        replaced_body(&ex.next().await),
        Some(br#"{"model":"alias","usage":{"prompt_tokens":2,"completion_tokens":1}}"#.to_vec())
    );
}

fn epp_trailers() -> epp::proto::ext_proc::ProcessingRequest {
    epp::proto::ext_proc::ProcessingRequest {
        request: Some(epp::proto::ext_proc::processing_request::Request::ResponseTrailers(Default::default())),
        ..Default::default()
    }
}

#[tokio::test]
async fn readiness_follows_endpoints() {
    let epp = TestEpp::start("endpoints: []\n", None, |_| {}).await;
    let stream = tokio::net::TcpStream::connect(epp.app.metrics_addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, http_body_util::Empty<bytes::Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/readyz").header("host", "x").body(http_body_util::Empty::new()).unwrap();
    assert_eq!(sender.send_request(req).await.unwrap().status(), 503);
}
