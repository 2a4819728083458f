//! A small HTTP/1.1 JSON client for the sidecars (hyper, no TLS, pooled connections). The
//! caller bounds each call with a deadline; any failure is an `Error`, never a panic.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// Why a sidecar call failed; `reason()` is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The deadline passed first.
    #[error("timed out")]
    Timeout,
    /// The URL is not valid.
    #[error("invalid URL {0:?}")]
    Url(String),
    /// Connecting, sending or reading failed.
    #[error("request failed: {0}")]
    Transport(String),
    /// Non-2xx status.
    #[error("answered {0}")]
    Status(StatusCode),
    /// The answer is not the expected JSON (or does not match the request).
    #[error("bad answer: {0}")]
    Decode(String),
}

impl Error {
    /// Short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Timeout => "timeout",
            Error::Url(_) => "url",
            Error::Transport(_) => "transport",
            Error::Status(_) => "status",
            Error::Decode(_) => "decode",
        }
    }
}

/// Pooled JSON client.
#[derive(Clone, Debug)]
pub struct JsonClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl JsonClient {
    /// A client whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        Self { client: crate::http_client::pooled(connect_timeout, 16) }
    }

    /// `POST {base}{path}` with a JSON body; the answer body on a 2xx status.
    pub async fn post(&self, base: &str, path: &str, body: Vec<u8>) -> Result<Bytes, Error> {
        let uri = format!("{}{path}", base.trim_end_matches('/'));
        let parsed: hyper::Uri = uri.parse().map_err(|_| Error::Url(uri.clone()))?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(parsed)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Error::Url(format!("{uri}: {e}")))?;
        let resp = self.client.request(req).await.map_err(|e| Error::Transport(e.to_string()))?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map_err(|e| Error::Transport(e.to_string()))?.to_bytes();
        if !status.is_success() {
            return Err(Error::Status(status));
        }
        Ok(bytes)
    }
}
