//! Builders for unit tests: `endpoint("pod-a").kv_usage(0.4).waiting(3).build()`,
//! `chat_request("m", &["hi"])`, `context_for(&request, &data)`.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use tokio::time::Instant;

use crate::endpoints::model::{Candidate, Endpoint, MetricsState, ROLE_LABEL, ServedModel, ServedModels};
use crate::framework::context::SchedulingContext;
use crate::framework::data::RequestData;
use crate::request::InferenceRequest;
use crate::request::openai::{ApiKind, parse_body};

/// Builder of a test candidate.
#[derive(Debug)]
pub struct EndpointBuilder {
    endpoint: Endpoint,
    metrics: MetricsState,
    models: Option<ServedModels>,
}

/// A candidate named `name` with fresh, idle metrics at a unique loopback-range address.
pub fn endpoint(name: &str) -> EndpointBuilder {
    let h = name.bytes().fold(7u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    let ip = IpAddr::V4(Ipv4Addr::new(10, (h >> 16) as u8, (h >> 8) as u8, h as u8));
    let metrics = MetricsState { updated_at: Some(Instant::now()), ..Default::default() };
    EndpointBuilder { endpoint: Endpoint::new(name, ip, 8000), metrics, models: None }
}

impl EndpointBuilder {
    /// Waiting queue size.
    pub fn waiting(mut self, n: u64) -> Self {
        self.metrics.metrics.waiting_queue_size = n;
        self
    }
    /// Running requests.
    pub fn running(mut self, n: u64) -> Self {
        self.metrics.metrics.running_requests = n;
        self
    }
    /// KV usage fraction.
    pub fn kv_usage(mut self, f: f64) -> Self {
        self.metrics.metrics.kv_cache_usage = f;
        self
    }
    /// LoRA adapters running and waiting, and the adapter limit.
    pub fn lora(mut self, active: &[&str], waiting: &[&str], max: u64) -> Self {
        self.metrics.metrics.active_models = active.iter().map(|s| s.to_string()).collect();
        self.metrics.metrics.waiting_models = waiting.iter().map(|s| s.to_string()).collect();
        self.metrics.metrics.max_active_models = Some(max);
        self
    }
    /// Invalid values at the last scrape (NaN, negative, infinite): load unknown.
    pub fn invalid(mut self) -> Self {
        self.metrics.invalid = true;
        self
    }
    /// Fresh (scraped now) or never scraped.
    pub fn fresh(mut self, fresh: bool) -> Self {
        self.metrics.updated_at = fresh.then(Instant::now);
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.endpoint.labels.insert(k.into(), v.into());
        self
    }
    /// Sets the `llm-d.ai/role` label.
    pub fn role(self, role: &str) -> Self {
        self.label(ROLE_LABEL, role)
    }
    /// Sets the address and port (`ip` must parse).
    pub fn at(mut self, ip: &str, port: u16) -> Self {
        self.endpoint.address = ip.parse().expect("test address");
        self.endpoint.port = port;
        self
    }
    /// A `/v1/models` list: the first id is the base model, the rest are its LoRA adapters
    /// (listed with `parent`, as vLLM does).
    pub fn serves(mut self, ids: &[&str]) -> Self {
        let base = ids.first().map(|s| s.to_string());
        let models = ids
            .iter()
            .enumerate()
            .map(|(i, id)| ServedModel { id: id.to_string(), parent: if i == 0 { None } else { base.clone() } })
            .collect();
        self.models = Some(ServedModels { models, updated_at: Instant::now() });
        self
    }
    /// The endpoint only.
    pub fn endpoint(self) -> Endpoint {
        self.endpoint
    }
    /// The candidate.
    pub fn build(self) -> Candidate {
        Candidate {
            endpoint: Arc::new(self.endpoint),
            metrics_known: self.metrics.known(Instant::now(), crate::endpoints::model::DEFAULT_STALENESS_THRESHOLD),
            metrics: Arc::new(self.metrics),
            models: self.models.map(Arc::new),
        }
    }
}

/// A chat request for `model` with one user message per text.
pub fn chat_request(model: &str, messages: &[&str]) -> InferenceRequest {
    let msgs: Vec<_> = messages.iter().map(|m| serde_json::json!({"role": "user", "content": m})).collect();
    let body = serde_json::to_vec(&serde_json::json!({"model": model, "messages": msgs})).unwrap_or_default();
    InferenceRequest {
        request_id: "test".into(),
        incoming_model: model.into(),
        target_model: model.into(),
        body_len: body.len(),
        body: parse_body(ApiKind::ChatCompletions, &body).ok(),
        ..Default::default()
    }
}

/// A completions request with token ids.
pub fn token_request(model: &str, tokens: &[u32]) -> InferenceRequest {
    let body = serde_json::to_vec(&serde_json::json!({"model": model, "prompt": tokens})).unwrap_or_default();
    InferenceRequest {
        request_id: "test".into(),
        incoming_model: model.into(),
        target_model: model.into(),
        body_len: body.len(),
        body: parse_body(ApiKind::Completions, &body).ok(),
        ..Default::default()
    }
}

/// A scheduling context over `request` and `data`.
pub fn context_for<'a>(request: &'a InferenceRequest, data: &'a RequestData) -> SchedulingContext<'a> {
    SchedulingContext { request, data, now: Instant::now() }
}
