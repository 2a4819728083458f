//! Smoke test of a running epp container, from outside it: `deploy/container/build.sh` starts
//! the image under KServe's restrictions (read-only root, uid 65532, no capabilities) with two
//! fake vLLM `/metrics` servers in its network namespace, one busy and one idle, and runs this
//! test with the published addresses:
//!
//! - `EPP_IMAGE_GRPC`, `EPP_IMAGE_HEALTH`, `EPP_IMAGE_METRICS`: ext_proc (TLS), gRPC health and
//!   admin addresses (`host:port`);
//! - `EPP_IMAGE_CA`: PEM certificate the container serves (`--cert-path`), for `localhost`;
//! - `EPP_IMAGE_ENDPOINT`: the idle endpoint, where every request must be routed.
//!
//! Without `EPP_IMAGE_GRPC` the test returns at once (no container to talk to).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Longest wait for the container to come up and scrape its endpoints.
const STARTUP: Duration = Duration::from_secs(30);

/// Health service names the charts and KServe probe.
const PROBED: &[&str] =
    &["", "liveness", "readiness", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor"];

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set with EPP_IMAGE_GRPC"))
}

fn addr(name: &str) -> SocketAddr {
    env(name).parse().unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Retries `attempt` every 100 ms until it returns `Some` or [`STARTUP`] passes.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut attempt: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + STARTUP;
    loop {
        if let Some(v) = attempt().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} within {STARTUP:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn health_status(health: SocketAddr, service: &str) -> Option<i32> {
    let channel = Channel::from_shared(format!("http://{health}")).ok()?.connect().await.ok()?;
    let reply = HealthClient::new(channel).check(HealthCheckRequest { service: service.into() }).await.ok()?;
    Some(reply.into_inner().status)
}

async fn tls_client(grpc: SocketAddr, ca: &str) -> ExternalProcessorClient<Channel> {
    let pem = std::fs::read(ca).expect("read EPP_IMAGE_CA");
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)).domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{grpc}"))
        .expect("uri")
        .tls_config(tls)
        .expect("tls config")
        .connect()
        .await
        .expect("TLS handshake with the container");
    ExternalProcessorClient::new(channel)
}

/// One chat request through ext_proc; the destination epp picked.
async fn route(client: &mut ExternalProcessorClient<Channel>, prompt: &str) -> Option<String> {
    let mut ex = Exchange::open(client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", prompt, false), true)).await;
    set_header(&ex.next().await, "x-gateway-destination-endpoint")
}

#[tokio::test]
async fn running_image_serves_health_metrics_and_routes() {
    if std::env::var_os("EPP_IMAGE_GRPC").is_none() {
        eprintln!("EPP_IMAGE_GRPC not set: no container to test (deploy/container/build.sh sets it)");
        return;
    }
    let (grpc, health, metrics) = (addr("EPP_IMAGE_GRPC"), addr("EPP_IMAGE_HEALTH"), addr("EPP_IMAGE_METRICS"));
    let idle = env("EPP_IMAGE_ENDPOINT");

    for service in PROBED {
        let status = eventually(&format!("health {service:?}"), || health_status(health, service)).await;
        assert_eq!(status, ServingStatus::Serving as i32, "health service {service:?}");
    }
    assert_eq!(http_get(metrics, "/healthz").await.0, 200);
    eventually("/readyz 200 (endpoints file loaded)", || async {
        (http_get(metrics, "/readyz").await.0 == 200).then_some(())
    })
    .await;

    // The busy endpoint reports a long queue and a full KV cache, the idle one nothing: once
    // both are scraped, every request goes to the idle one.
    let mut client = tls_client(grpc, &env("EPP_IMAGE_CA")).await;
    let deadline = Instant::now() + STARTUP;
    while route(&mut client, "warm-up").await.as_deref() != Some(idle.as_str()) {
        assert!(Instant::now() < deadline, "no request routed to {idle} within {STARTUP:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..20 {
        assert_eq!(route(&mut client, &format!("question {i}")).await.as_deref(), Some(idle.as_str()), "request {i}");
    }

    let exposition = scrape(metrics).await;
    assert!(
        exposition.contains("inference_objective_request_total") || exposition.contains("llm_d_epp_request_total"),
        "request counters exported:\n{exposition}"
    );
}
