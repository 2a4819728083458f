//! Connection hygiene on the listeners: silent TCP connections and HTTP/2-preface-only
//! connections are closed after the handshake timeout, idle connections after the idle
//! timeout (busy ones are not), connections beyond the cap are closed on accept and counted,
//! ext_proc streams idle for `--idle-stream-timeout` end with DEADLINE_EXCEEDED (streams that
//! keep sending do not), and routing and `/healthz` keep working throughout.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection; true when it did within [`WAIT`].
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // the server's SETTINGS frame, GOAWAY, ...
        }
    }
}

/// The value of the first `/metrics` line starting with `series`.
async fn metric(epp: &TestEpp, series: &str) -> f64 {
    let text = scrape(epp.app.metrics_addr).await;
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn route(
    client: &mut epp::proto::ext_proc::external_processor_client::ExternalProcessorClient<tonic::transport::Channel>,
) -> String {
    let mut ex = Exchange::open(client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    set_header(&ex.next().await, "x-gateway-destination-endpoint").expect("destination")
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

#[tokio::test]
async fn silent_and_preface_only_connections_are_closed_after_the_handshake_timeout() {
    let pod = FakeVllm::start([127, 0, 11, 1], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |s| {
        s.limits.ext_proc.handshake_timeout = Duration::from_millis(300);
        s.limits.admin.handshake_timeout = Duration::from_millis(300);
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..5 {
        silent.push(connect(epp.app.grpc_addr).await);
    }
    let mut preface = connect(epp.app.grpc_addr).await;
    preface.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("preface");
    let mut admin_silent = connect(epp.app.metrics_addr).await;
    let mut health_silent = connect(epp.app.health_addr).await;

    for s in &mut silent {
        assert!(closed_by_server(s).await, "silent ext_proc connection still open");
    }
    assert!(closed_by_server(&mut preface).await, "preface-only connection still open");
    assert!(closed_by_server(&mut admin_silent).await, "silent admin connection still open");
    assert!(closed_by_server(&mut health_silent).await, "silent health connection still open");
    let closed = metric(&epp, "epp_connections_closed_total{listener=\"ext_proc\",reason=\"handshake_timeout\"}").await;
    assert!(closed >= 6.0, "handshake timeouts counted: {closed}");
    let mut client = epp.client().await;
    assert_eq!(route(&mut client).await, pod.addr.to_string(), "routing works");
}

#[tokio::test]
async fn the_connection_cap_is_enforced_while_routing_and_healthz_keep_working() {
    let pod = FakeVllm::start([127, 0, 11, 2], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |s| {
        s.limits.ext_proc.max_connections = 3;
    })
    .await;
    let mut client = epp.client().await;
    assert_eq!(route(&mut client).await, pod.addr.to_string());
    // Two silent connections fill the remaining slots; every further one is closed at once.
    let _held = [connect(epp.app.grpc_addr).await, connect(epp.app.grpc_addr).await];
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric(&epp, "epp_connections_open{listener=\"ext_proc\"}").await < 3.0 {
        assert!(tokio::time::Instant::now() < deadline, "slots not taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..20 {
        let mut extra = connect(epp.app.grpc_addr).await;
        assert!(closed_by_server(&mut extra).await, "a connection beyond the cap stayed open");
    }
    let rejected = metric(&epp, "epp_connections_rejected_total{listener=\"ext_proc\",reason=\"limit\"}").await;
    assert!(rejected >= 20.0, "rejections counted: {rejected}");
    for _ in 0..5 {
        assert_eq!(route(&mut client).await, pod.addr.to_string(), "the established connection still routes");
    }
    assert_eq!(http_get(epp.app.metrics_addr, "/healthz").await.0, 200, "admin unaffected");
}

#[tokio::test]
async fn idle_connections_are_closed_busy_ones_are_not() {
    let pod = FakeVllm::start([127, 0, 11, 3], 0, 0, 0.0).await;
    let idle = Duration::from_millis(200);
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |s| {
        s.limits.ext_proc.idle_timeout = idle;
    })
    .await;
    let mut client = epp.client().await;
    // A stream held open across several idle timeouts keeps its connection.
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    tokio::time::sleep(idle * 4).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    drop(ex);
    // Without streams the connection is closed after the idle timeout, and counted.
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric(&epp, "epp_connections_closed_total{listener=\"ext_proc\",reason=\"idle_timeout\"}").await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "idle connection never closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The client reconnects on its next request.
    let mut client = epp.client().await;
    assert_eq!(route(&mut client).await, pod.addr.to_string());
}

/// Waits for the end of a stream's replies; the status it ended with (`None`: ended OK).
async fn stream_end(ex: &mut Exchange) -> Option<tonic::Status> {
    use tokio_stream::StreamExt;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, ex.rx.next()).await {
            Err(_) => panic!("the stream did not end within {WAIT:?}"),
            Ok(None) => return None,
            Ok(Some(Err(status))) => return Some(status),
            Ok(Some(Ok(_))) => continue,
        }
    }
}

#[tokio::test]
async fn idle_streams_end_with_deadline_exceeded_streams_that_send_do_not() {
    let pod = FakeVllm::start([127, 0, 11, 4], 0, 0, 0.0).await;
    let idle = Duration::from_millis(600);
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |s| {
        s.extproc.idle_stream_timeout = Some(idle);
    })
    .await;
    let mut client = epp.client().await;
    let headers = || request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)));

    // Request phase: headers, then nothing.
    let opened = tokio::time::Instant::now();
    let mut stalled = Exchange::open(&mut client).await;
    stalled.send(headers()).await;
    // Response phase: routed, then the client never sends the response headers.
    let mut routed = Exchange::open(&mut client).await;
    routed.send(headers()).await;
    routed.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&routed.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    // A stream whose client keeps talking (a body trickling in) lives well past the timeout.
    let mut busy = Exchange::open(&mut client).await;
    busy.send(headers()).await;
    let mut ticks = tokio::time::interval(idle / 4);
    for _ in 0..12 {
        ticks.tick().await;
        busy.send(request_body(b"", false)).await;
    }
    assert!(opened.elapsed() > idle * 2, "the busy stream outlived two timeouts");

    for (name, ex) in [("request phase", &mut stalled), ("response phase", &mut routed)] {
        let status = stream_end(ex).await.unwrap_or_else(|| panic!("{name}: ended OK instead of timing out"));
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{name}: {status:?}");
    }
    assert!(opened.elapsed() >= idle, "ended before the timeout");
    assert_eq!(epp.app.streams.idle_timeouts(), 2);
    let counted = metric(&epp, "epp_extproc_streams_closed_total{reason=\"idle_timeout\"}").await;
    assert_eq!(counted, 2.0);

    // The busy stream was not cut: it finishes its request normally.
    busy.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&busy.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    assert_eq!(epp.app.streams.idle_timeouts(), 2);
    assert_eq!(route(&mut client).await, pod.addr.to_string(), "the connection still routes");
}
