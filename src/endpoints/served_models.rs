//! `models-data-source` + `models-data-extractor` at run time: one polling task per endpoint
//! that GETs `http://<address>:<metricsPort><path>` (default `/v1/models`; llm-d polls the
//! endpoint's metrics host, which is the serving port unless configured otherwise), parses
//! the OpenAI model list and stores it in the endpoint's models cell. A failed poll
//! (connect, timeout, non-200, bad JSON) keeps the previous list, is counted in
//! `llm_d_epp_datalayer_poll_errors_total{source_type="models-data-source"}` and is logged
//! once per state change. Tasks follow the endpoint store: a removed endpoint's task stops
//! and its list goes with the entry.
//!
//! Consumers: `served-model-filter` reads `Candidate::models`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus::IntCounterVec;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::model::{EndpointId, ServedModel, ServedModels};
use super::store::{EndpointEntry, EndpointStore};

/// Largest `/v1/models` answer accepted (a few KB normally; many adapters stay far below).
const MAX_BODY_BYTES: usize = 4 << 20;
/// `source_type` label of this source's poll errors.
pub const SOURCE_TYPE: &str = "models-data-source";

/// Poller settings (from the `models-data-source` parameters and flags).
#[derive(Clone, Debug)]
pub struct ModelsConfig {
    /// URL path (default `/v1/models`).
    pub path: String,
    /// Poll period per endpoint.
    pub interval: Duration,
    /// Per-poll timeout.
    pub timeout: Duration,
}

/// Why one poll failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
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
    /// Not an OpenAI model list.
    #[error("not an OpenAI model list: {0}")]
    Parse(#[source] serde_json::Error),
    /// Bad URI.
    #[error("invalid models URL {0}")]
    Uri(String),
}

#[derive(Deserialize)]
struct ListRepr {
    data: Vec<EntryRepr>,
}

#[derive(Deserialize)]
struct EntryRepr {
    id: String,
    #[serde(default)]
    parent: Option<String>,
}

/// Parses an OpenAI `GET /v1/models` answer (`{"object": "list", "data": [{"id", "parent"?}]}`;
/// other fields ignored). Entries with an empty id are dropped; an empty `parent` counts as
/// none.
pub fn parse_models(body: &[u8]) -> Result<Vec<ServedModel>, serde_json::Error> {
    let list: ListRepr = serde_json::from_slice(body)?;
    Ok(list
        .data
        .into_iter()
        .filter(|e| !e.id.is_empty())
        .map(|e| ServedModel { id: e.id, parent: e.parent.filter(|p| !p.is_empty()) })
        .collect())
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Runs the pollers until `cancel`, starting a task per new endpoint and stopping the task of
/// each removed (or replaced) one.
pub async fn run_models_pollers(
    store: EndpointStore,
    config: Arc<ModelsConfig>,
    poll_errors: IntCounterVec,
    cancel: CancellationToken,
) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(config.timeout));
    let client: HttpClient = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1).build(connector);
    let errors = poll_errors.with_label_values(&[SOURCE_TYPE]);
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
            let poller =
                Poller { client: client.clone(), config: config.clone(), errors: errors.clone(), store: store.clone() };
            let span = info_span!("models_poller", endpoint = %entry.endpoint.id);
            tokio::spawn(poller.run(entry.clone(), token.clone()).instrument(span));
            tasks.insert(entry.endpoint.id.clone(), (entry.clone(), token));
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

struct Poller {
    client: HttpClient,
    config: Arc<ModelsConfig>,
    errors: prometheus::IntCounter,
    store: EndpointStore,
}

impl Poller {
    async fn run(self, entry: Arc<EndpointEntry>, cancel: CancellationToken) {
        let endpoint = &entry.endpoint;
        let url =
            format!("http://{}{}", super::model::host_port(endpoint.address, endpoint.metrics_port), self.config.path);
        let mut ticks = super::periodic::Periodic::new(self.config.interval);
        let mut failing = false;
        while ticks.tick(&cancel).await {
            match self.poll(&url).await {
                Ok(models) => {
                    if failing {
                        debug!("Models poll recovered");
                        failing = false;
                    }
                    self.store.publish_models(&entry, ServedModels { models, updated_at: Instant::now() });
                }
                Err(error) => {
                    self.errors.inc();
                    if !failing {
                        warn!(%error, url, "Models poll failing; keeping the last model list");
                        failing = true;
                    }
                }
            }
        }
    }

    async fn poll(&self, url: &str) -> Result<Vec<ServedModel>, ModelsError> {
        let uri: hyper::Uri = url.parse().map_err(|_| ModelsError::Uri(url.to_string()))?;
        let request = hyper::Request::get(uri)
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|_| ModelsError::Uri(url.to_string()))?;
        let fetch = async {
            let response = self.client.request(request).await.map_err(ModelsError::Request)?;
            if response.status() != hyper::StatusCode::OK {
                return Err(ModelsError::Status(response.status().as_u16()));
            }
            let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| ModelsError::Body(e.to_string()))?;
            Ok(body.to_bytes())
        };
        let body = tokio::time::timeout(self.config.timeout, fetch)
            .await
            .map_err(|_| ModelsError::Timeout(self.config.timeout))??;
        parse_models(&body).map_err(ModelsError::Parse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vllm_model_lists() {
        let body = br#"{"object":"list","data":[
            {"id":"llama","object":"model","created":1,"owned_by":"vllm","root":"/m","parent":null,"max_model_len":8192},
            {"id":"sql-v3","object":"model","parent":"llama","root":"/adapters/sql"},
            {"id":"","parent":"llama"},
            {"id":"x","parent":""}]}"#;
        let models = parse_models(body).unwrap();
        assert_eq!(
            models,
            vec![
                ServedModel { id: "llama".into(), parent: None },
                ServedModel { id: "sql-v3".into(), parent: Some("llama".into()) },
                ServedModel { id: "x".into(), parent: None },
            ]
        );
        assert!(parse_models(b"{}").is_err());
        assert!(parse_models(b"not json").is_err());
        assert!(parse_models(br#"{"data":[{"parent":"a"}]}"#).is_err(), "an entry without id is malformed");
    }
}
