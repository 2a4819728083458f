//! Per-request accounting for the gRPC servers: a tower layer that finds the connection's
//! [`ConnInfo`] in the request extensions (plain or inside tonic's `TlsConnectInfo`) and holds
//! a [`StreamGuard`] until the response body ends, so the connection knows whether it has open
//! requests (handshake done, idle or busy).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tonic::transport::server::TlsConnectInfo;

use super::conn::{ConnInfo, StreamGuard};

/// The layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrackStreams;

impl<S> tower_layer::Layer<S> for TrackStreams {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked { inner }
    }
}

/// A service whose requests count as open streams of their connection.
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
}

fn guard_for<B>(request: &http::Request<B>) -> Option<StreamGuard> {
    let ext = request.extensions();
    let info = ext.get::<ConnInfo>().or_else(|| ext.get::<TlsConnectInfo<ConnInfo>>().map(|t| t.get_ref()))?;
    Some(info.tracker.stream_started())
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Tracked<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<GuardedBody<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let guard = guard_for(&request);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|inner| GuardedBody { inner: Box::pin(inner), _guard: guard }))
        })
    }
}

/// A response body that ends its request's stream accounting when dropped.
pub struct GuardedBody<B> {
    inner: Pin<Box<B>>,
    _guard: Option<StreamGuard>,
}

impl<B: Body> Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
