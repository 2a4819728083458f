//! Model-server metric scraping: one polling task per endpoint that GETs
//! `http(s)://<address>:<metricsPort><path>` every `--refresh-metrics-interval` over a shared
//! keep-alive client, extracts the load figures and writes them into the endpoint's metrics
//! cell. A dead or slow endpoint is marked failed (its values age and become stale), counted,
//! and logged once per state change; it never stops the scraper or the service.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use prometheus::IntCounterVec;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::model::MetricsState;
use super::poll::{self, FetchError, PollClient};
use super::store::{EndpointEntry, EndpointStore};
use super::vllm_metrics::{EngineMapping, extract};

/// Largest exposition accepted (vLLM's is ~30-100 KB).
const MAX_BODY_BYTES: usize = 16 << 20;

/// Scraper settings (from flags and the `metrics-data-source` / `core-metrics-extractor`
/// plugin parameters).
#[derive(Clone, Debug)]
pub struct ScrapeConfig {
    /// Poll period per endpoint.
    pub interval: Duration,
    /// Per-poll timeout.
    pub timeout: Duration,
    /// URL path (default `/metrics`).
    pub path: String,
    /// Engine mapping by name; the endpoint's engine label selects one, else `default_engine`.
    pub engines: HashMap<String, EngineMapping>,
    /// Pod label naming the engine.
    pub engine_label: String,
    /// Engine used when the label is absent.
    pub default_engine: String,
    /// `https` scrapes (`--model-server-metrics-scheme https`) with this client TLS config;
    /// `None` = plain HTTP.
    pub tls: Option<tokio_rustls::rustls::ClientConfig>,
    /// Port scraped instead of each endpoint's metrics port (`--model-server-metrics-port`).
    pub port: Option<u16>,
}

impl ScrapeConfig {
    /// The metrics URL of `endpoint`.
    pub fn url(&self, endpoint: &super::model::Endpoint) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let port = self.port.unwrap_or(endpoint.metrics_port);
        format!("{scheme}://{}{}", super::model::host_port(endpoint.address, port), self.path)
    }
}

/// Counters of the scraper.
#[derive(Clone, Debug)]
pub struct ScrapeMetrics {
    /// `llm_d_epp_datalayer_poll_errors_total{source_type}`.
    pub poll_errors: IntCounterVec,
    /// `llm_d_epp_datalayer_invalid_values_total{field}`: load values rejected at parse
    /// (NaN, infinite, negative); the endpoint's load is unknown until a valid scrape.
    pub invalid_values: IntCounterVec,
}

impl ScrapeMetrics {
    /// Registers the scraper counters.
    pub fn register(registry: &prometheus::Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, label: &str| -> Result<IntCounterVec, prometheus::Error> {
            let vec = IntCounterVec::new(prometheus::Opts::new(name, help), &[label])?;
            registry.register(Box::new(vec.clone()))?;
            Ok(vec)
        };
        Ok(Self {
            poll_errors: counter(
                "llm_d_epp_datalayer_poll_errors_total",
                "Failed model-server metric polls (connect, timeout, non-200, unparsable).",
                "source_type",
            )?,
            invalid_values: counter(
                "llm_d_epp_datalayer_invalid_values_total",
                "Model-server load values rejected at parse (NaN, infinite or negative), by field.",
                "field",
            )?,
        })
    }
}

/// Why one poll failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The GET failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The exposition had none of the expected families.
    #[error("no known metric family in the exposition (missing: {0})")]
    NoMetrics(String),
    /// Load values were NaN, infinite or negative.
    #[error("invalid values (NaN, infinite or negative) for: {0}")]
    Invalid(String),
}

/// Runs the scrapers until `cancel`: follows the store, starting a task per new endpoint and
/// stopping the task of each removed one.
pub async fn run_scrapers(
    store: EndpointStore,
    config: Arc<ScrapeConfig>,
    metrics: ScrapeMetrics,
    cancel: CancellationToken,
) {
    let client = match &config.tls {
        Some(tls) => poll::client_with_tls(config.timeout, 2, tls.clone()),
        None => poll::client(config.timeout, 2),
    };
    let supervisor_store = store.clone();
    poll::per_endpoint(supervisor_store, cancel, move |entry, token| {
        let span = info_span!("scraper", endpoint = %entry.endpoint.id);
        let poller =
            Poller { client: client.clone(), config: config.clone(), metrics: metrics.clone(), store: store.clone() };
        poller.run(entry, token).instrument(span)
    })
    .await
}

struct Poller {
    store: EndpointStore,
    client: PollClient,
    config: Arc<ScrapeConfig>,
    metrics: ScrapeMetrics,
}

impl Poller {
    async fn run(self, entry: Arc<EndpointEntry>, cancel: CancellationToken) {
        let endpoint = &entry.endpoint;
        let url = self.config.url(endpoint);
        let engine = endpoint.label(&self.config.engine_label).unwrap_or(&self.config.default_engine).to_string();
        let Some(mapping) =
            self.config.engines.get(&engine).or_else(|| self.config.engines.get(&self.config.default_engine))
        else {
            warn!(engine, "No metric mapping for engine; endpoint will not be scraped");
            return;
        };
        let mut ticks = crate::periodic::Periodic::new(self.config.interval);
        let mut failing = false;
        while ticks.tick(&cancel).await {
            match self.poll(&url, mapping).await {
                Ok(state) => {
                    if failing {
                        debug!("Metrics scrape recovered");
                        failing = false;
                    }
                    self.store.publish_metrics(&entry, state);
                }
                Err(error) => {
                    self.metrics.poll_errors.with_label_values(&["metrics-data-source"]).inc();
                    if !failing {
                        warn!(%error, url, "Metrics scrape failing; endpoint load unknown once its metrics are stale");
                        failing = true;
                    }
                    let invalid = matches!(error, ScrapeError::Invalid(_));
                    let prev = entry.metrics.load();
                    if !prev.last_scrape_failed || prev.invalid != invalid {
                        let mut next = MetricsState::clone(&prev);
                        next.last_scrape_failed = true;
                        next.invalid = invalid;
                        self.store.publish_metrics(&entry, next);
                    }
                }
            }
        }
    }

    async fn poll(&self, url: &str, mapping: &EngineMapping) -> Result<MetricsState, ScrapeError> {
        let body = poll::get(&self.client, url, "text/plain", self.config.timeout, MAX_BODY_BYTES).await?;
        // Checked first (word-at-a-time over ASCII): `from_utf8_lossy` walks byte by byte
        // (~7 instructions a byte, as much as the extraction itself on vLLM's ~50 KB).
        let text = match std::str::from_utf8(&body) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&body),
        };
        let extracted = extract(&text, mapping);
        if !extracted.invalid.is_empty() {
            for field in &extracted.invalid {
                self.metrics.invalid_values.with_label_values(&[field.as_str()]).inc();
            }
            let fields: Vec<&str> = extracted.invalid.iter().map(|m| m.as_str()).collect();
            return Err(ScrapeError::Invalid(fields.join(", ")));
        }
        if !extracted.extracted_any {
            let missing: Vec<&str> = extracted.missing.iter().map(|m| m.as_str()).collect();
            return Err(ScrapeError::NoMetrics(missing.join(", ")));
        }
        Ok(MetricsState {
            metrics: extracted.metrics,
            updated_at: Some(Instant::now()),
            last_scrape_failed: false,
            invalid: false,
        })
    }
}
