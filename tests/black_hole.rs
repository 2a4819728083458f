//! No black hole: a pod whose `/metrics` never answers usefully (HTTP 500, hang, garbage,
//! redirect, refused) or reports NaN / negative / infinite values reads as idle, and used
//! to receive every request. Its load is now unknown and it ranks below every pod with
//! known load (src/plugins/load.rs), at startup, after an endpoints-file reload, and once
//! a pod that used to answer goes stale (`--metrics-staleness-threshold`).

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// How a broken pod answers `GET /metrics`.
#[derive(Clone, Debug)]
enum Fault {
    /// A valid, idle exposition (the pod works).
    Healthy,
    /// This status with an empty body.
    Status(u16),
    /// Never answers.
    Hang,
    /// 200 with a body that is not an exposition.
    Garbage,
    /// 200 with an exposition whose values are this token (`NaN`, `-3`, `+Inf`).
    Value(&'static str),
}

/// A pod whose `/metrics` fails as told; switchable while running.
struct BrokenPod {
    addr: SocketAddr,
    fault: Arc<Mutex<Fault>>,
}

impl BrokenPod {
    async fn start(ip: [u8; 4], fault: Fault) -> Self {
        let listener = TcpListener::bind(SocketAddr::from((ip, 0))).await.expect("bind broken pod");
        let addr = listener.local_addr().expect("addr");
        let fault = Arc::new(Mutex::new(fault));
        let shared = fault.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let fault = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
                        let fault = fault.lock().map(|f| f.clone()).unwrap_or(Fault::Hang);
                        async move {
                            let (status, body) = match fault {
                                Fault::Healthy => (200, exposition(0, 0, 0.0)),
                                Fault::Status(s) => (s, String::new()),
                                Fault::Hang => std::future::pending().await,
                                Fault::Garbage => (200, "\u{0}\u{1}<html>not metrics</html>{{{{\n".repeat(50)),
                                Fault::Value(v) => (
                                    200,
                                    exposition(0, 0, 0.0)
                                        .replace(" 0.0\n", &format!(" {v}\n"))
                                        .replace(" 0\n", &format!(" {v}\n")),
                                ),
                            };
                            let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
                            *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
                            if status == 302 {
                                response
                                    .headers_mut()
                                    .insert("location", "http://127.0.0.1:1/metrics".parse().unwrap());
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Self { addr, fault }
    }

    fn set(&self, fault: Fault) {
        *self.fault.lock().expect("lock") = fault;
    }
}

/// An address nothing listens on (connections are refused).
async fn refused_addr(ip: [u8; 4]) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::from((ip, 0))).await.expect("bind");
    listener.local_addr().expect("addr")
}

/// Routes `n` requests with distinct prompts; returns the destinations.
async fn route_many(epp: &TestEpp, n: usize) -> Vec<String> {
    let mut client = epp.client().await;
    let mut out = Vec::new();
    for i in 0..n {
        let mut ex = Exchange::open(&mut client).await;
        ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
        ex.send(request_body(&chat("m", &format!("question number {i} about something else"), false), true)).await;
        out.push(set_header(&ex.next().await, "x-gateway-destination-endpoint").expect("destination"));
    }
    out
}

/// Waits until the healthy pods' load is known.
async fn wait_known(epp: &TestEpp, names: &[&str]) {
    epp.wait_scraped(|_| {
        let c = epp.app.store.candidates();
        names.iter().all(|n| c.iter().any(|c| &**c.id() == *n && c.metrics_known))
    })
    .await;
}

async fn healthy_pair(first: u8) -> (FakeVllm, FakeVllm) {
    (FakeVllm::start([127, 0, 9, first], 0, 0, 0.1).await, FakeVllm::start([127, 0, 9, first + 1], 0, 0, 0.1).await)
}

async fn assert_no_traffic_at_startup(fault: Fault, ip: u8) {
    let (a, b) = healthy_pair(ip).await;
    let broken = BrokenPod::start([127, 0, 9, ip + 2], fault.clone()).await;
    let file = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[]), ("broken", broken.addr, &[])]);
    let epp = TestEpp::start(&file, None, |_| {}).await;
    wait_known(&epp, &["a", "b"]).await;
    let got = route_many(&epp, 30).await;
    assert!(!got.contains(&broken.addr.to_string()), "{fault:?}: the broken pod got traffic: {got:?}");
    epp.app.shutdown().await;
}

#[tokio::test]
async fn http_500_pod_gets_no_traffic() {
    assert_no_traffic_at_startup(Fault::Status(500), 10).await;
}

#[tokio::test]
async fn hanging_pod_gets_no_traffic() {
    assert_no_traffic_at_startup(Fault::Hang, 20).await;
}

#[tokio::test]
async fn garbage_metrics_pod_gets_no_traffic() {
    assert_no_traffic_at_startup(Fault::Garbage, 30).await;
}

#[tokio::test]
async fn redirecting_pod_gets_no_traffic() {
    assert_no_traffic_at_startup(Fault::Status(302), 40).await;
}

#[tokio::test]
async fn nan_negative_and_infinite_values_get_no_traffic_and_are_counted() {
    for (i, v) in ["NaN", "-3", "+Inf"].into_iter().enumerate() {
        assert_no_traffic_at_startup(Fault::Value(v), 50 + 3 * i as u8).await;
    }
    // The rejection is counted per field.
    let (a, b) = healthy_pair(70).await;
    let broken = BrokenPod::start([127, 0, 9, 72], Fault::Value("NaN")).await;
    let file = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[]), ("broken", broken.addr, &[])]);
    let epp = TestEpp::start(&file, None, |_| {}).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = scrape(epp.app.metrics_addr).await;
        if text.contains("llm_d_epp_datalayer_invalid_values_total{field=\"kv_usage\"}") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "invalid values not counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    epp.app.shutdown().await;
}

#[tokio::test]
async fn refused_pod_gets_no_traffic() {
    let (a, b) = healthy_pair(80).await;
    let dead = refused_addr([127, 0, 9, 82]).await;
    let file = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[]), ("dead", dead, &[])]);
    let epp = TestEpp::start(&file, None, |_| {}).await;
    wait_known(&epp, &["a", "b"]).await;
    let got = route_many(&epp, 30).await;
    assert!(!got.contains(&dead.to_string()), "the refused pod got traffic: {got:?}");
}

#[tokio::test]
async fn broken_pod_added_by_a_reload_gets_no_traffic() {
    let (a, b) = healthy_pair(90).await;
    let broken = BrokenPod::start([127, 0, 9, 92], Fault::Status(500)).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[])]), None, |_| {}).await;
    wait_known(&epp, &["a", "b"]).await;
    let file = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[]), ("broken", broken.addr, &[])]);
    std::fs::write(&epp.endpoints_file, file).expect("rewrite");
    epp.wait_endpoints(&["a", "b", "broken"]).await;
    let got = route_many(&epp, 30).await;
    assert!(!got.contains(&broken.addr.to_string()), "the reloaded broken pod got traffic: {got:?}");
}

#[tokio::test]
async fn pod_whose_scrapes_start_hanging_goes_stale_and_loses_traffic() {
    let (a, b) = healthy_pair(100).await;
    // Starts healthy and idler than the others (kv 0 vs 0.1): it gets the traffic.
    let pod = BrokenPod::start([127, 0, 9, 102], Fault::Healthy).await;
    let file = endpoints_yaml(&[("a", a.addr, &[]), ("b", b.addr, &[]), ("pod", pod.addr, &[])]);
    let epp = TestEpp::start(&file, None, |s| {
        s.limits.metrics_staleness_threshold = Duration::from_millis(300);
        s.scrape_timeout = Duration::from_millis(100);
    })
    .await;
    wait_known(&epp, &["a", "b", "pod"]).await;
    assert!(route_many(&epp, 3).await.iter().all(|d| *d == pod.addr.to_string()), "the idlest pod wins");
    pod.set(Fault::Hang);
    let deadline = tokio::time::Instant::now() + WAIT;
    while epp.app.store.candidates().iter().any(|c| &**c.id() == "pod" && c.metrics_known) {
        assert!(tokio::time::Instant::now() < deadline, "metrics never went stale");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = route_many(&epp, 20).await;
    assert!(!got.contains(&pod.addr.to_string()), "the stale pod still got traffic: {got:?}");
}

#[tokio::test]
async fn all_pods_unknown_still_route() {
    let broken = BrokenPod::start([127, 0, 9, 110], Fault::Status(500)).await;
    let dead = refused_addr([127, 0, 9, 111]).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("broken", broken.addr, &[]), ("dead", dead, &[])]), None, |_| {}).await;
    let got = route_many(&epp, 4).await;
    assert_eq!(got.len(), 4, "requests still routed when no load is known");
}
