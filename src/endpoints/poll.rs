//! What the per-endpoint pollers (metrics scraper, model lists) share: the pooled HTTP client,
//! a GET bounded in time and body size, and the supervisor that keeps one polling task per
//! endpoint of the store (started when an endpoint appears, cancelled when it leaves or is
//! replaced).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio_util::sync::CancellationToken;

use super::model::EndpointId;
use super::store::{EndpointEntry, EndpointStore};

/// The pollers' HTTP(S) client (body-less GETs).
pub type PollClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The shared pooled client (`crate::http_client`) for body-less GETs of `http://` URLs
/// (an `https://` URL fails: no certificate is trusted).
pub fn client(connect_timeout: Duration, max_idle_per_host: usize) -> PollClient {
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let tls = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(tokio_rustls::rustls::RootCertStore::empty())
        .with_no_client_auth();
    client_with_tls(connect_timeout, max_idle_per_host, tls)
}

/// The shared pooled client for `http://` and `https://` URLs; HTTPS uses `tls`
/// (see [`crate::http_client::client_tls`]).
pub fn client_with_tls(
    connect_timeout: Duration,
    max_idle_per_host: usize,
    tls: tokio_rustls::rustls::ClientConfig,
) -> PollClient {
    crate::http_client::pooled_https_for(connect_timeout, max_idle_per_host, tls)
}

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Connection or protocol failure.
    #[error("request failed: {0}")]
    Request(#[source] hyper_util::client::legacy::Error),
    /// No answer within the timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// Non-200 status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// Body read failure or too large.
    #[error("body read failed: {0}")]
    Body(String),
    /// Bad URI.
    #[error("invalid URL {0}")]
    Uri(String),
}

/// GETs `url` asking for `accept`; the whole exchange must finish within `timeout` and the
/// body stay within `max_body` bytes.
pub async fn get(
    client: &PollClient,
    url: &str,
    accept: &str,
    timeout: Duration,
    max_body: usize,
) -> Result<Bytes, FetchError> {
    let uri: hyper::Uri = url.parse().map_err(|_| FetchError::Uri(url.to_string()))?;
    let request = hyper::Request::get(uri)
        .header(hyper::header::ACCEPT, accept)
        .body(Empty::new())
        .map_err(|_| FetchError::Uri(url.to_string()))?;
    let fetch = async {
        let response = client.request(request).await.map_err(FetchError::Request)?;
        if response.status() != hyper::StatusCode::OK {
            return Err(FetchError::Status(response.status().as_u16()));
        }
        let body = Limited::new(response.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| FetchError::Body(e.to_string()))?;
        Ok(body.to_bytes())
    };
    tokio::time::timeout(timeout, fetch).await.map_err(|_| FetchError::Timeout(timeout))?
}

/// Runs until `cancel` (or the store closes): calls `start(entry, token)` for each endpoint
/// that appears and spawns the future it returns; cancels `token` when that endpoint leaves
/// the store or is replaced by a new entry.
pub async fn per_endpoint<F, Fut>(store: EndpointStore, cancel: CancellationToken, mut start: F)
where
    F: FnMut(Arc<EndpointEntry>, CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut changes = store.subscribe();
    let mut tasks: HashMap<EndpointId, (Arc<EndpointEntry>, CancellationToken)> = HashMap::new();
    loop {
        let set = store.snapshot();
        tasks.retain(|id, (entry, token)| {
            let keep = set.get(id).is_some_and(|cur| Arc::ptr_eq(cur, entry));
            if !keep {
                token.cancel();
            }
            keep
        });
        for entry in &set.entries {
            if tasks.contains_key(&entry.endpoint.id) {
                continue;
            }
            let token = cancel.child_token();
            tokio::spawn(start(entry.clone(), token.clone()));
            tasks.insert(entry.endpoint.id.clone(), (entry.clone(), token));
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}
