//! What a plugin factory works with: the configured `PluginSpec`, the `BuildContext` of
//! handles (endpoint store, shared metric families, earlier plugins, RNG, index registry), `BuildError` and strict
//! parameter decoding. The catalogue of factories is `plugins::registry`.

use std::sync::Arc;

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec};
use serde::de::DeserializeOwned;

use super::handles::{IndexRegistry, RandomSource};
use super::plugin::PluginInstance;
use super::plugin::PluginName;
use crate::endpoints::store::EndpointStore;
use crate::telemetry::twin::{RATIO_BUCKETS, TwinGaugeVec, TwinHistogramVec};

/// A plugin as configured.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// Instance name.
    pub name: PluginName,
    /// Type as written in the config (may be an alias).
    pub type_name: String,
    /// Raw parameters (`null` when absent).
    pub parameters: serde_json::Value,
    /// Config path of this plugin, e.g. `plugins[3]`.
    pub path: String,
}

/// Why a plugin could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct BuildError {
    /// Config path, e.g. `plugins[2].parameters.maxNumOfEndpoints`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl BuildError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

/// Handles factories may give to stateful plugins.
#[derive(Clone, Debug, Default)]
pub struct BuildContext {
    /// The endpoint store.
    pub endpoints: EndpointStore,
    /// Metric families shared by plugins.
    pub metrics: PluginMetrics,
    /// Plugins instantiated before the one being built, in order (the loader fills this in
    /// for each factory call), so parameters may name earlier plugins (e.g. deciders).
    pub earlier: Vec<PluginInstance>,
    /// Names of every plugin declared in the document, for suggestions.
    pub declared: Vec<String>,
    /// What pickers draw from (thread RNG unless a driver seeds it for reproducible runs).
    pub random: RandomSource,
    /// Where plugins owning a KV-event prefix index offer it (read by in-process drivers).
    pub indexes: IndexRegistry,
    /// Link to the other replicas (docs/replicas.md); disabled by default.
    pub replica: super::replica::ReplicaHandle,
}

impl BuildContext {
    /// Resolves a plugin named in `spec`'s parameters at `param` (e.g. `deciders.prefill`):
    /// it must be declared earlier and fill the role `role` returns. Errors carry the path
    /// and the closest declared name.
    pub fn resolve<T: ?Sized>(
        &self,
        spec: &PluginSpec,
        param: &str,
        name: &str,
        role_name: &str,
        role: impl Fn(&PluginInstance) -> Option<Arc<T>>,
    ) -> Result<Arc<T>, BuildError> {
        let path = format!("{}.parameters.{param}", spec.path);
        if let Some(inst) = self.earlier.iter().find(|i| &*i.name == name) {
            return role(inst).ok_or_else(|| {
                BuildError::new(
                    &path,
                    format!("plugin {name:?} ({}) is a {}, not a {role_name}", inst.type_name, inst.roles()),
                )
            });
        }
        if self.declared.iter().any(|d| d == name) {
            return Err(BuildError::new(
                path,
                format!("plugin {name:?} is declared after {:?}; declare it earlier in `plugins`", &*spec.name),
            ));
        }
        let mut message = format!("references undefined plugin {name:?}");
        if let Some(s) = crate::suggest::closest(name, self.declared.iter().map(String::as_str)) {
            message.push_str(&format!(" (did you mean {s:?}?)"));
        }
        Err(BuildError::new(path, message))
    }
}

/// Metric families plugins record into (registered once by the app).
#[derive(Clone, Debug)]
pub struct PluginMetrics {
    /// `prefix_indexer_hit_ratio{plugin_name, plugin_type}`.
    pub prefix_hit_ratio: TwinHistogramVec,
    /// `prefix_indexer_hit_bytes{plugin_name, plugin_type}`.
    pub prefix_hit_bytes: TwinHistogramVec,
    /// `prefix_indexer_size{plugin_name, plugin_type}`.
    pub prefix_indexer_size: TwinGaugeVec,
    /// `llm_d_epp_disagg_decision_total{plugin_name, plugin_type, model_name, decision_type}`.
    pub disagg_decisions: IntCounterVec,
    /// Deprecated twin `llm_d_inference_scheduler_disagg_decision_total{model_name, decision_type}`.
    pub disagg_decisions_legacy: IntCounterVec,
    /// `llm_d_epp_pd_decision_total{plugin_name, plugin_type, model_name, decision_type}`
    /// (`pd-profile-handler` only; `decode-only` | `prefill-decode`).
    pub pd_decisions: IntCounterVec,
    /// Deprecated twin `llm_d_inference_scheduler_pd_decision_total{model_name, decision_type}`.
    pub pd_decisions_legacy: IntCounterVec,
    /// `llm_d_epp_inflight_requests{endpoint_name, producer_name}` (`inflight-load-producer`).
    pub inflight_requests: IntGaugeVec,
    /// `llm_d_epp_inflight_tokens{endpoint_name, producer_name}` (`inflight-load-producer`).
    pub inflight_tokens: IntGaugeVec,
    /// `epp_request_attribute_reports_total{plugin_name, outcome}` (`request-attribute-reporter`).
    pub attribute_reports: IntCounterVec,
    /// `llm_d_epp_served_model_filter_decisions_total{plugin_name, outcome}`.
    pub served_model_decisions: IntCounterVec,
    /// `llm_d_epp_served_model_filter_candidates_total{plugin_name}`.
    pub served_model_candidates: IntCounterVec,
    /// `llm_d_epp_served_model_filter_unlisted_candidates_total{plugin_name}`.
    pub served_model_unlisted: IntCounterVec,
    /// KV-event and precise index series (`epp_kv_*`).
    pub kv: std::sync::Arc<crate::kvcache::KvCacheMetrics>,
    /// Tokenizer outcomes, latency and prefix-cache use (`token-producer`).
    pub tokenize: crate::tokenize::metrics::TokenizeMetrics,
    /// Latency-predictor series (`predicted-latency-producer`).
    pub latency: crate::latency::metrics::LatencyMetrics,
    /// `llm_d_epp_program_aware_*` gauges (`program-aware-fairness`).
    pub program_aware: std::sync::Arc<crate::flowcontrol::program_metrics::ProgramAwareMetrics>,
    /// `llm_d_epp_encoder_cache_queries_total{plugin_type, plugin_name, modality}`
    /// (`mm-embeddings-cache-producer`).
    pub encoder_cache_queries: IntCounterVec,
    /// `llm_d_epp_encoder_cache_hits_total{plugin_type, plugin_name, pod, modality}`.
    pub encoder_cache_hits: IntCounterVec,
    /// `llm_d_epp_encoder_cache_hit_ratio{plugin_type, plugin_name}`.
    pub encoder_cache_hit_ratio: HistogramVec,
}

impl PluginMetrics {
    /// Registers the families.
    pub fn register(registry: &prometheus::Registry) -> Result<Self, prometheus::Error> {
        let labels = &["plugin_name", "plugin_type"];
        let hit_bytes: Vec<f64> = std::iter::once(0.0).chain((4..=16).map(|p| f64::from(1u32 << p))).collect();
        Ok(Self {
            prefix_hit_ratio: TwinHistogramVec::register(
                registry,
                "inference_extension_prefix_indexer_hit_ratio",
                "llm_d_epp_prefix_indexer_hit_ratio",
                "Fraction of the prompt's blocks found in the prefix index for the chosen endpoint.",
                RATIO_BUCKETS,
                labels,
            )?,
            prefix_hit_bytes: TwinHistogramVec::register(
                registry,
                "inference_extension_prefix_indexer_hit_bytes",
                "llm_d_epp_prefix_indexer_hit_bytes",
                "Matched prefix length in bytes (blocks x block size x 4).",
                &hit_bytes,
                labels,
            )?,
            prefix_indexer_size: TwinGaugeVec::register(
                registry,
                "inference_extension_prefix_indexer_size",
                "llm_d_epp_prefix_indexer_size",
                "Entries in the approximate prefix index.",
                labels,
            )?,
            disagg_decisions: counter(
                registry,
                "llm_d_epp_disagg_decision_total",
                "Disaggregation decisions by stage combination.",
                &["plugin_name", "plugin_type", "model_name", "decision_type"],
            )?,
            disagg_decisions_legacy: counter(
                registry,
                "llm_d_inference_scheduler_disagg_decision_total",
                "Deprecated twin of llm_d_epp_disagg_decision_total.",
                &["model_name", "decision_type"],
            )?,
            pd_decisions: counter(
                registry,
                "llm_d_epp_pd_decision_total",
                "Prefill/decode decisions of pd-profile-handler.",
                &["plugin_name", "plugin_type", "model_name", "decision_type"],
            )?,
            pd_decisions_legacy: counter(
                registry,
                "llm_d_inference_scheduler_pd_decision_total",
                "Deprecated twin of llm_d_epp_pd_decision_total.",
                &["model_name", "decision_type"],
            )?,
            inflight_requests: gauge(
                registry,
                "llm_d_epp_inflight_requests",
                "Requests in flight per endpoint, as tracked by an inflight-load-producer.",
                &["endpoint_name", "producer_name"],
            )?,
            inflight_tokens: gauge(
                registry,
                "llm_d_epp_inflight_tokens",
                "Tokens in flight per endpoint, as tracked by an inflight-load-producer.",
                &["endpoint_name", "producer_name"],
            )?,
            attribute_reports: counter(
                registry,
                "epp_request_attribute_reports_total",
                "request-attribute-reporter evaluations at response end, by outcome.",
                &["plugin_name", "outcome"],
            )?,
            served_model_decisions: counter(
                registry,
                "llm_d_epp_served_model_filter_decisions_total",
                "Served model filter decisions, by outcome.",
                &["plugin_name", "outcome"],
            )?,
            served_model_candidates: counter(
                registry,
                "llm_d_epp_served_model_filter_candidates_total",
                "Candidate endpoints evaluated by the served model filter.",
                &["plugin_name"],
            )?,
            served_model_unlisted: counter(
                registry,
                "llm_d_epp_served_model_filter_unlisted_candidates_total",
                "Candidate endpoints without a stored /v1/models list, as seen by the served model filter.",
                &["plugin_name"],
            )?,
            kv: std::sync::Arc::new(crate::kvcache::KvCacheMetrics::register(registry)?),
            tokenize: crate::tokenize::metrics::TokenizeMetrics::register(registry)?,
            latency: crate::latency::metrics::LatencyMetrics::register(registry)?,
            program_aware: std::sync::Arc::new(crate::flowcontrol::program_metrics::ProgramAwareMetrics::register(
                registry,
            )?),
            encoder_cache_queries: counter(
                registry,
                "llm_d_epp_encoder_cache_queries_total",
                "Multimodal item lookups against the encoder-cache affinity model.",
                &["plugin_type", "plugin_name", "modality"],
            )?,
            encoder_cache_hits: counter(
                registry,
                "llm_d_epp_encoder_cache_hits_total",
                "Multimodal item lookups that found the item in an endpoint's encoder-cache model, by endpoint.",
                &["plugin_type", "plugin_name", "pod", "modality"],
            )?,
            encoder_cache_hit_ratio: {
                let opts = prometheus::HistogramOpts::new(
                    "llm_d_epp_encoder_cache_hit_ratio",
                    "Fraction of a request's multimodal items found in one candidate's encoder-cache model.",
                )
                .buckets(RATIO_BUCKETS.to_vec());
                let h = HistogramVec::new(opts, &["plugin_type", "plugin_name"])?;
                registry.register(Box::new(h.clone()))?;
                h
            },
        })
    }
}

fn counter(
    registry: &prometheus::Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(prometheus::Opts::new(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(
    registry: &prometheus::Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(prometheus::Opts::new(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

impl Default for PluginMetrics {
    fn default() -> Self {
        Self::register(&prometheus::Registry::new()).expect("a fresh registry has no name clashes")
    }
}

/// Decodes a plugin's parameters strictly into `T` (absent or `null` -> `T::default()`).
pub fn decode_params<T: DeserializeOwned + Default>(spec: &PluginSpec) -> Result<T, BuildError> {
    if spec.parameters.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(spec.parameters.clone())
        .map_err(|e| BuildError::new(format!("{}.parameters", spec.path), e.to_string()))
}

/// Deserializes a Go-style duration string (`200ms`, `2s`, `1m30s`).
pub fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
}
