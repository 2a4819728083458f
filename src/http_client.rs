//! The pooled outbound HTTP/1.1 client shared by epp's outbound callers (vLLM render, latency
//! predictor, the per-endpoint pollers): no TLS, Nagle off, bounded connect time, idle
//! connections kept 90 s.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A client sending `Full` bodies.
pub fn pooled(connect_timeout: Duration, max_idle_per_host: usize) -> Client<HttpConnector, Full<Bytes>> {
    pooled_for(connect_timeout, max_idle_per_host)
}

/// A client for request bodies of type `B` with at most `max_idle_per_host` idle connections
/// per host.
pub fn pooled_for<B>(connect_timeout: Duration, max_idle_per_host: usize) -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(max_idle_per_host)
        .build(connector)
}
