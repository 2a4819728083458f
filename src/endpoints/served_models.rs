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

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::model::{ServedModel, ServedModels};
use super::poll::{self, FetchError, PollClient};
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
    /// The GET failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Not an OpenAI model list.
    #[error("not an OpenAI model list: {0}")]
    Parse(#[source] serde_json::Error),
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

/// Runs the pollers until `cancel`, starting a task per new endpoint and stopping the task of
/// each removed (or replaced) one.
pub async fn run_models_pollers(
    store: EndpointStore,
    config: Arc<ModelsConfig>,
    poll_errors: IntCounterVec,
    cancel: CancellationToken,
) {
    let client = poll::client(config.timeout, 1);
    let errors = poll_errors.with_label_values(&[SOURCE_TYPE]);
    let supervisor_store = store.clone();
    poll::per_endpoint(supervisor_store, cancel, move |entry, token| {
        let span = info_span!("models_poller", endpoint = %entry.endpoint.id);
        let poller =
            Poller { client: client.clone(), config: config.clone(), errors: errors.clone(), store: store.clone() };
        poller.run(entry, token).instrument(span)
    })
    .await
}

struct Poller {
    client: PollClient,
    config: Arc<ModelsConfig>,
    errors: prometheus::IntCounter,
    store: EndpointStore,
}

impl Poller {
    async fn run(self, entry: Arc<EndpointEntry>, cancel: CancellationToken) {
        let endpoint = &entry.endpoint;
        let url =
            format!("http://{}{}", super::model::host_port(endpoint.address, endpoint.metrics_port), self.config.path);
        let mut ticks = crate::periodic::Periodic::new(self.config.interval);
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
        let body = poll::get(&self.client, url, "application/json", self.config.timeout, MAX_BODY_BYTES).await?;
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
