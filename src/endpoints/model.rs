//! The endpoint model the scheduler reads: identity and addressing of one serving endpoint
//! (`Endpoint`), its latest scraped load (`MetricsState`), the models it serves
//! (`ServedModels`) and the view handed to plugins (`Candidate`). Pure data; no I/O.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::time::Instant;

use super::vllm_metrics::PodMetrics;

/// Identifier of an endpoint: the unique `name` from discovery (e.g. `pod-a`, `pod-a-rank-1`).
pub type EndpointId = Arc<str>;

/// Pod label carrying the prefill/decode role (`llm-d.ai/role`).
pub const ROLE_LABEL: &str = "llm-d.ai/role";

/// One serving endpoint (one vLLM API server port, i.e. one data-parallel rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Unique id.
    pub id: EndpointId,
    /// IPv4 or IPv6 address.
    pub address: IpAddr,
    /// Serving port: the destination is `address:port`.
    pub port: u16,
    /// Port of `/metrics` (defaults to `port`).
    pub metrics_port: u16,
    /// Pod labels (role, engine type, ...).
    pub labels: BTreeMap<String, String>,
    /// Where this endpoint publishes vLLM KV events, when known (`tcp://ip:port`).
    pub kv_events_endpoint: Option<String>,
    /// Position of this endpoint among its pod's ranks (0 for single-rank pods).
    pub rank: u16,
    /// Destination value `ip:port` (`[v6]:port` for IPv6), computed once.
    pub host_port: Arc<str>,
}

impl Endpoint {
    /// Builds an endpoint and precomputes its destination string.
    pub fn new(id: impl Into<EndpointId>, address: IpAddr, port: u16) -> Self {
        Self {
            id: id.into(),
            address,
            port,
            metrics_port: port,
            labels: BTreeMap::new(),
            kv_events_endpoint: None,
            rank: 0,
            host_port: host_port(address, port).into(),
        }
    }

    /// The socket address of the serving port.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    /// A label value, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// Formats `ip:port`, bracketing IPv6 addresses (`[::1]:8000`).
pub fn host_port(address: IpAddr, port: u16) -> String {
    SocketAddr::new(address, port).to_string()
}

/// Default of `--metrics-staleness-threshold` (Go EPP: 2s): metrics older than this are unknown.
pub const DEFAULT_STALENESS_THRESHOLD: std::time::Duration = std::time::Duration::from_secs(2);

/// The latest scrape result of one endpoint.
#[derive(Clone, Debug, Default)]
pub struct MetricsState {
    /// Last successfully extracted values (defaults when never scraped).
    pub metrics: PodMetrics,
    /// When `metrics` were last updated; `None` when never scraped.
    pub updated_at: Option<Instant>,
    /// Whether the most recent scrape failed (the values above are then older).
    pub last_scrape_failed: bool,
    /// Whether the most recent scrape reported invalid values (NaN, negative, infinite): the
    /// endpoint's load is then unknown until a valid scrape.
    pub invalid: bool,
}

impl MetricsState {
    /// True when the values describe the endpoint's load: scraped successfully within
    /// `threshold` and not invalidated since. Endpoints whose metrics are not known rank below
    /// every endpoint with known metrics in the load-based plugins (see
    /// `crate::plugins::load`), so a pod whose `/metrics` fails never looks idle.
    pub fn known(&self, now: Instant, threshold: std::time::Duration) -> bool {
        !self.invalid && !self.is_stale(now, threshold)
    }

    /// True when no scrape succeeded within `max_age` (or never).
    pub fn is_stale(&self, now: Instant, max_age: std::time::Duration) -> bool {
        match self.updated_at {
            Some(at) => now.saturating_duration_since(at) > max_age,
            None => true,
        }
    }
}

/// One entry of an endpoint's `GET /v1/models` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedModel {
    /// Model or LoRA adapter id (what requests name in `model`).
    pub id: String,
    /// Base model of a LoRA adapter (vLLM sets it on adapters only).
    pub parent: Option<String>,
}

/// The models an endpoint listed at its last successful `/v1/models` poll.
#[derive(Clone, Debug, PartialEq)]
pub struct ServedModels {
    /// Entries in the server's order.
    pub models: Vec<ServedModel>,
    /// When the list was fetched.
    pub updated_at: Instant,
}

impl ServedModels {
    /// The entry for `id`, if listed.
    pub fn find(&self, id: &str) -> Option<&ServedModel> {
        self.models.iter().find(|m| m.id == id)
    }
}

/// An endpoint together with the metrics seen when the request arrived.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The endpoint.
    pub endpoint: Arc<Endpoint>,
    /// Its metrics at request time.
    pub metrics: Arc<MetricsState>,
    /// Its `/v1/models` list (`models-data-source`); `None` until the first successful poll
    /// or when no models source is configured.
    pub models: Option<Arc<ServedModels>>,
    /// Whether `metrics` were known (fresh and valid, [`MetricsState::known`]) when the
    /// candidate was taken.
    pub metrics_known: bool,
}

impl Candidate {
    /// The endpoint id.
    pub fn id(&self) -> &EndpointId {
        &self.endpoint.id
    }
}
