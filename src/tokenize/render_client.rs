//! The `vllm` backend: vLLM's render endpoints compute the token ids (chat template and
//! tokenizer of the served model), so ids match the engine exactly.
//!
//! `POST {url}/v1/completions/render` answers a JSON array with one `{token_ids}` per prompt
//! (the ids are concatenated); `POST {url}/v1/chat/completions/render` answers
//! `{token_ids, features}`; `features.mm_hashes` / `features.mm_placeholders` become the
//! request's multimodal items (a `features` value of another shape is ignored, the ids are
//! still used). The request
//! body is the client's body with `model` replaced by the configured `modelName`. HTTP/1.1,
//! no TLS, up to 16 idle connections. The caller applies the deadline.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde::Deserialize;

use crate::request::multimodal::{MediaItem, RenderFeatures};
use crate::request::openai::{ApiKind, BodyError, rewrite_model};

/// Why a render call failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The body could not be rewritten for the render call.
    #[error("request body cannot be rewritten")]
    Body(#[source] BodyError),
    /// The URL is not valid.
    #[error("invalid render URL {0:?}")]
    Url(String),
    /// Building the HTTP request failed.
    #[error("cannot build the render request")]
    Http(#[source] hyper::http::Error),
    /// Connecting or sending failed.
    #[error("render request failed")]
    Request(#[source] hyper_util::client::legacy::Error),
    /// Reading the answer failed.
    #[error("reading the render answer failed")]
    Read(#[source] hyper::Error),
    /// Non-200 status.
    #[error("render endpoint answered {0}")]
    Status(StatusCode),
    /// The answer is not the expected JSON.
    #[error("render answer is not valid")]
    Decode(#[source] serde_json::Error),
    /// The API has no render endpoint.
    #[error("no render endpoint for this API")]
    Unsupported,
}

/// A client for one vLLM server's render endpoints.
#[derive(Clone, Debug)]
pub struct RenderClient {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    model_name: String,
}

#[derive(Deserialize)]
struct Rendered {
    token_ids: Vec<u32>,
    #[serde(default)]
    features: Option<Box<serde_json::value::RawValue>>,
}

impl Rendered {
    /// The multimodal items of `features`; empty when absent, `null` or of another shape.
    fn media(&self) -> Vec<MediaItem> {
        let Some(raw) = &self.features else { return Vec::new() };
        match serde_json::from_str::<Option<RenderFeatures>>(raw.get()) {
            Ok(f) => f.map(|f| f.items()).unwrap_or_default(),
            Err(error) => {
                tracing::debug!(error = &error as &dyn std::error::Error, "Ignoring render features");
                Vec::new()
            }
        }
    }
}

/// What a render call returned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderOutput {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Multimodal items (chat only; empty for text prompts).
    pub media: Vec<MediaItem>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CompletionsAnswer {
    Many(Vec<Rendered>),
    One(Rendered),
}

impl RenderClient {
    /// A client for `url` (e.g. `http://localhost:8000`) sending `model_name`.
    pub fn new(url: &str, model_name: &str, connect_timeout: Duration) -> Self {
        let client = crate::http_client::pooled(connect_timeout, 16);
        Self { client, base: url.trim_end_matches('/').to_string(), model_name: model_name.to_string() }
    }

    /// Token ids (and, for chat, multimodal items) of `body` (a completions or chat
    /// completions body) as vLLM renders them.
    ///
    /// Errors: see [`RenderError`]; other APIs are [`RenderError::Unsupported`].
    pub async fn render(&self, api: ApiKind, body: &[u8]) -> Result<RenderOutput, RenderError> {
        let path = match api {
            ApiKind::Completions => "/v1/completions/render",
            ApiKind::ChatCompletions => "/v1/chat/completions/render",
            _ => return Err(RenderError::Unsupported),
        };
        let body = rewrite_model(body, &self.model_name).map_err(RenderError::Body)?;
        let uri = format!("{}{path}", self.base);
        let uri: hyper::Uri = uri.parse().map_err(|_| RenderError::Url(uri.clone()))?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(RenderError::Http)?;
        let resp = self.client.request(req).await.map_err(RenderError::Request)?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map_err(RenderError::Read)?.to_bytes();
        if status != StatusCode::OK {
            return Err(RenderError::Status(status));
        }
        match api {
            ApiKind::Completions => match serde_json::from_slice(&bytes).map_err(RenderError::Decode)? {
                CompletionsAnswer::Many(list) => {
                    Ok(RenderOutput { ids: list.into_iter().flat_map(|r| r.token_ids).collect(), media: Vec::new() })
                }
                CompletionsAnswer::One(r) => Ok(RenderOutput { ids: r.token_ids, media: Vec::new() }),
            },
            _ => {
                let r = serde_json::from_slice::<Rendered>(&bytes).map_err(RenderError::Decode)?;
                Ok(RenderOutput { media: r.media(), ids: r.token_ids })
            }
        }
    }
}
