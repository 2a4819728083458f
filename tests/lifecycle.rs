//! Health and shutdown of the real `epp` process: readiness waits for the first pool sync,
//! `List` and `Watch` answer as GIE's health server, SIGTERM turns readiness off at once,
//! streams open at SIGTERM finish, new streams are accepted during the grace, and the process
//! exits 0 by `--drain-timeout` whatever its peers do (stalled stream, silent connection).

mod common;

use std::time::Duration;

use common::kube::{MockKube, pod, pool};
use common::process::EppProcess;
use common::*;
use epp::proto::grpc::health::v1::HealthCheckRequest;
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/ns/pods";
const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools";
const READINESS: [&str; 4] = ["", "inference-extension", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"];

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// An epp process serving h2c ext_proc from an endpoints file with one fake vLLM.
async fn epp_with_endpoints(fake: &FakeVllm, dir: &tempfile::TempDir, extra: &[&str]) -> EppProcess {
    let file = dir.path().join("endpoints.yaml");
    std::fs::write(&file, endpoints_yaml(&[("pod", fake.addr, &[])])).unwrap();
    let mut list = args(&["--endpoints-file", file.to_str().unwrap()]);
    list.extend(args(extra));
    let mut epp = EppProcess::spawn(&list, &[]);
    epp.wait_health("readiness", ServingStatus::Serving).await;
    epp
}

async fn route(ex: &mut Exchange) -> Option<String> {
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    set_header(&ex.next().await, "x-gateway-destination-endpoint")
}

#[tokio::test]
async fn readiness_waits_for_the_pool_and_turns_off_on_sigterm() {
    let fake = FakeVllm::start([127, 0, 4, 1], 0, 0, 0.0).await;
    let mock = MockKube::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mock.kubeconfig(dir.path());
    let list = args(&["--pool-name", "p", "--secure-serving=false", "--drain-grace=2s", "--drain-timeout=10s"]);
    let mut epp = EppProcess::spawn(&list, &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("NAMESPACE", "ns")]);

    // No pool yet: alive, not ready.
    epp.wait_health("liveness", ServingStatus::Serving).await;
    let not_ready: Vec<(String, i32)> = std::iter::once(("liveness".to_string(), ServingStatus::Serving as i32))
        .chain(READINESS.iter().map(|n| (n.to_string(), ServingStatus::NotServing as i32)))
        .collect();
    let mut expected = not_ready.clone();
    expected.sort();
    assert_eq!(epp.health_list().await, expected);

    mock.apply(POOLS, pool("p", json!({"app": "vllm"}), &[fake.addr.port()]));
    mock.apply(PODS, pod("vllm-0", json!({"app": "vllm"}), Some("127.0.4.1"), true));
    for name in READINESS {
        epp.wait_health(name, ServingStatus::Serving).await;
    }
    let mut health = epp.health_client().await;
    let unknown = health.check(HealthCheckRequest { service: "nope".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let watch = health.watch(HealthCheckRequest { service: "readiness".into() }).await.unwrap_err();
    assert_eq!(watch.code(), tonic::Code::Unimplemented);

    epp.terminate();
    for name in READINESS {
        epp.wait_health(name, ServingStatus::NotServing).await;
    }
    epp.wait_health("liveness", ServingStatus::Serving).await;
    // Still routing during the grace (no preStop hook in a scratch image).
    let mut client = epp.ext_proc_client(false).await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    assert_eq!(route(&mut ex).await, Some(fake.addr.to_string()));
    drop((ex, client));
    let (status, _) = epp.wait_exit(Duration::from_secs(15)).await.expect("exit");
    assert!(status.success(), "{status}\n{}", epp.stderr());
}

#[tokio::test]
async fn open_stream_finishes_after_the_grace_then_the_process_exits_0() {
    let fake = FakeVllm::start([127, 0, 4, 2], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut epp =
        epp_with_endpoints(&fake, &dir, &["--secure-serving=false", "--drain-grace=200ms", "--drain-timeout=20s"])
            .await;
    let mut client = epp.ext_proc_client(false).await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;

    epp.terminate();
    // Observable end of the grace: the server has stopped accepting.
    let deadline = std::time::Instant::now() + WAIT;
    while !epp.stderr().contains("Grace over") {
        assert!(std::time::Instant::now() < deadline, "no end of grace:\n{}", epp.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(route(&mut ex).await, Some(fake.addr.to_string()), "the open stream is still served");
    drop((ex, client));
    let (status, elapsed) = epp.wait_exit(Duration::from_secs(15)).await.expect("exit");
    assert!(status.success(), "{status}\n{}", epp.stderr());
    assert!(elapsed < Duration::from_secs(15));
    assert!(epp.stderr().contains("Drained"), "{}", epp.stderr());
}

#[tokio::test]
async fn stalled_stream_is_cut_and_counted_at_the_drain_timeout() {
    let fake = FakeVllm::start([127, 0, 4, 3], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut epp =
        epp_with_endpoints(&fake, &dir, &["--drain-grace=100ms", "--drain-timeout=2s", "--zap-encoder=json"]).await;
    // TLS (secure serving stays on by default).
    let mut client = epp.ext_proc_client(true).await;
    let stalled = Exchange::open(&mut client).await;
    stalled.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    epp.wait_health("readiness", ServingStatus::Serving).await;

    epp.terminate();
    let (status, elapsed) = epp.wait_exit(Duration::from_secs(10)).await.expect("exit by the deadline");
    assert!(status.success(), "{status}\n{}", epp.stderr());
    assert!(elapsed < Duration::from_secs(5), "exit {elapsed:?} after SIGTERM with --drain-timeout=2s");
    let log = epp.stderr();
    let cut = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["msg"].as_str().is_some_and(|m| m.starts_with("Drain deadline reached")))
        .unwrap_or_else(|| panic!("no cut report:\n{log}"));
    assert_eq!(cut["cut_streams"], 1, "{cut}");
    assert_eq!(cut["level"], "warn");
    drop((stalled, client));
}

#[tokio::test]
async fn silent_connections_do_not_hold_the_exit() {
    for secure in ["--secure-serving=true", "--secure-serving=false"] {
        let fake = FakeVllm::start([127, 0, 4, 4], 0, 0, 0.0).await;
        let dir = tempfile::tempdir().unwrap();
        let mut epp = epp_with_endpoints(&fake, &dir, &[secure, "--drain-grace=100ms", "--drain-timeout=20s"]).await;
        // Connected, never says a word (no TLS ClientHello, no HTTP/2 preface).
        let silent = tokio::net::TcpStream::connect(epp.grpc).await.unwrap();
        epp.terminate();
        let (status, elapsed) = epp.wait_exit(Duration::from_secs(25)).await.expect("exit");
        assert!(status.success(), "{secure}: {status}\n{}", epp.stderr());
        assert!(elapsed < Duration::from_secs(10), "{secure}: a silent peer held the exit for {elapsed:?}");
        drop(silent);
    }
}

/// The cut counter, in process: `App::drain` over a stalled stream.
#[tokio::test]
async fn drain_counts_cut_streams_in_the_registry() {
    let fake = FakeVllm::start([127, 0, 4, 5], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", fake.addr, &[])]), None, |_| {}).await;
    let mut client = epp.client().await;
    let stalled = Exchange::open(&mut client).await;
    stalled.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    let streams = epp.app.streams.clone();
    let deadline = std::time::Instant::now() + WAIT;
    while streams.open_streams() != 1 {
        assert!(std::time::Instant::now() < deadline, "stream not open");
        tokio::task::yield_now().await;
    }
    let registry = epp.app.registry.clone();
    let plan = epp::shutdown::DrainPlan { grace: Duration::from_millis(10), timeout: Duration::from_millis(300) };
    let report = epp.app.drain(plan).await;
    assert_eq!(report.cut_streams, 1);
    let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
    assert!(text.contains("epp_drain_cut_streams_total 1"), "{text}");
    drop(stalled);
}
