//! The admin HTTP server on `--metrics-port`: `GET /metrics` (Prometheus text of the one
//! registry), `GET /healthz` (alive), `GET /readyz` (ready to route), and when enabled
//! `/debug/pprof/` (`--enable-pprof`, [`super::profiling`]) and `/debug/state` (a JSON
//! snapshot from [`StateSource`]). Plain HTTP/1.1. An optional [`MetricsGuard`] decides on
//! every `/metrics` and `/debug/...` request from its bearer token
//! (`--metrics-endpoint-auth`: Kubernetes token and access reviews); `/healthz` and
//! `/readyz` stay open. With a rustls config (`--metrics-cert-dir`,
//! `--metrics-client-ca-file`) every connection is TLS (handshake bounded in time).

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

/// Deadline of a TLS handshake on the metrics port.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Decides whether a `/metrics` request with this bearer token (`None`: no
/// `Authorization: Bearer` header) is served: `200 OK` to serve, else the status to answer
/// (401, 403, 500).
pub type MetricsGuard =
    Arc<dyn Fn(Option<String>) -> std::pin::Pin<Box<dyn Future<Output = StatusCode> + Send>> + Send + Sync>;

/// What the admin server exposes beyond the registry, and how it guards it.
#[derive(Clone, Default)]
pub struct AdminOptions {
    /// Which names of twin metric families `/metrics` exports.
    pub naming: super::naming::MetricsNaming,
    /// Authentication of `/metrics` (`None`: open).
    pub guard: Option<MetricsGuard>,
    /// TLS on every connection (`None`: plain HTTP).
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Serve `/debug/pprof/` (`--enable-pprof`).
    pub pprof: bool,
    /// Source of `/debug/state` (`None`: not served).
    pub state: Option<StateSource>,
}

/// Builds the `/debug/state` document when asked.
pub type StateSource = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Paths the [`MetricsGuard`] protects.
fn is_guarded(path: &str) -> bool {
    path == "/metrics" || path.starts_with("/debug/")
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
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
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
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                // HTTP/1.1 serves one request at a time; the response body is complete here.
                let busy = tracker.stream_started();
                let (registry, ready, options) = (registry.clone(), ready.clone(), options.clone());
                async move {
                    let _busy = busy;
                    if let Some(guard) = options.guard.as_ref().filter(|_| is_guarded(req.uri().path())) {
                        let status = guard(bearer_token(&req)).await;
                        if status != StatusCode::OK {
                            let reason = status.canonical_reason().unwrap_or("denied");
                            return Ok::<_, Infallible>(text(status, format!("{reason}\n")));
                        }
                    }
                    if req.method() == Method::GET && req.uri().path().starts_with("/debug/") {
                        let (path, query) = (req.uri().path().to_owned(), req.uri().query().map(str::to_owned));
                        return Ok::<_, Infallible>(debug(&path, query.as_deref(), &options).await);
                    }
                    Ok::<_, Infallible>(route(&req, &registry, &ready, &options.naming))
                }
            });
            let result = match acceptor {
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    let tls = tokio::select! {
                        _ = cancel.cancelled() => return,
                        done = handshake => match done {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(error)) => return debug!(%error, ?peer, "admin TLS handshake failed"),
                            Err(_) => return debug!(?peer, "admin TLS handshake timed out"),
                        },
                    };
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        result = conn => result,
                    }
                }
                None => {
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        result = conn => result,
                    }
                }
            };
            if let Err(error) = result {
                debug!(%error, ?peer, "admin connection ended");
            }
        });
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_token<B>(req: &Request<B>) -> Option<String> {
    let value = req.headers().get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

/// `/debug/pprof/...` and `/debug/state`, each `404` unless enabled.
async fn debug(path: &str, query: Option<&str>, options: &AdminOptions) -> Response<Full<Bytes>> {
    if options.pprof && (path == "/debug/pprof" || path.starts_with("/debug/pprof/")) {
        let reply = super::profiling::handle(path, query).await;
        return with_content_type(text(reply.status, reply.body), reply.content_type);
    }
    match (&options.state, path) {
        (Some(state), "/debug/state") => match serde_json::to_vec_pretty(&state()) {
            Ok(body) => with_content_type(text(StatusCode::OK, body), "application/json"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encode failed: {e}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn with_content_type(mut response: Response<Full<Bytes>>, content_type: &str) -> Response<Full<Bytes>> {
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

fn route<B>(
    req: &Request<B>,
    registry: &Registry,
    ready: &ReadinessCheck,
    naming: &super::naming::MetricsNaming,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut buf = Vec::new();
            let encoder = TextEncoder::new();
            if let Err(e) = encoder.encode(&naming.filter(registry.gather()), &mut buf) {
                return text(StatusCode::INTERNAL_SERVER_ERROR, format!("encode failed: {e}\n"));
            }
            with_content_type(text(StatusCode::OK, buf), encoder.format_type())
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
