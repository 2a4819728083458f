//! The admin HTTP server on `--metrics-port`: `GET /metrics` (Prometheus text of the one
//! registry), `GET /healthz` (alive) and `GET /readyz` (ready to route). Plain HTTP/1.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Readiness: `Err(why)` when not ready; `Ok(details)` when ready, with detail lines an
/// operator may alert on (e.g. KV-event hash drift).
pub type ReadinessCheck = Arc<dyn Fn() -> Result<Vec<String>, String> + Send + Sync>;

/// What the admin server exposes beyond the registry.
#[derive(Clone, Debug, Default)]
pub struct AdminOptions {
    /// Which names of twin metric families `/metrics` exports.
    pub naming: super::naming::MetricsNaming,
}

/// Serves the admin endpoints on the connections of `incoming` (the guarded accept loop:
/// connection cap, handshake and idle timeouts) until `cancel`.
pub async fn serve(
    mut incoming: crate::net::incoming::Incoming,
    registry: Registry,
    ready: ReadinessCheck,
    options: AdminOptions,
    cancel: CancellationToken,
) {
    use tokio_stream::StreamExt;
    loop {
        let stream = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = incoming.next() => match accepted {
                Some(Ok(stream)) => stream,
                Some(Err(error)) => { debug!(%error, "admin accept failed"); continue; }
                None => return,
            },
        };
        let peer = stream.info().remote;
        let tracker = stream.info().tracker.clone();
        let registry = registry.clone();
        let ready = ready.clone();
        let options = options.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                // HTTP/1.1 serves one request at a time; the response body is complete here.
                let _busy = tracker.stream_started();
                let response = route(&req, &registry, &ready, &options);
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = cancel.cancelled() => {}
                result = conn => if let Err(error) = result { debug!(%error, ?peer, "admin connection ended"); },
            }
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

fn route<B>(
    req: &Request<B>,
    registry: &Registry,
    ready: &ReadinessCheck,
    options: &AdminOptions,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut buf = Vec::new();
            let encoder = TextEncoder::new();
            if let Err(e) = encoder.encode(&options.naming.filter(registry.gather()), &mut buf) {
                return text(StatusCode::INTERNAL_SERVER_ERROR, format!("encode failed: {e}\n"));
            }
            let mut r = text(StatusCode::OK, buf);
            if let Ok(v) = hyper::header::HeaderValue::from_str(encoder.format_type()) {
                r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            r
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match ready() {
            Ok(details) => {
                let mut body = String::from("ready\n");
                for d in details {
                    body.push_str(&d);
                    body.push('\n');
                }
                text(StatusCode::OK, body)
            }
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
