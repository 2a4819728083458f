//! The plugin registry: plugin type name -> factory, built once by `builtin()`. A factory turns
//! a `PluginSpec` (name, type, raw parameters, config path) into a `PluginInstance`, decoding
//! its parameters strictly. Deprecated aliases map to their replacement and log once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec};
use serde::de::DeserializeOwned;

use super::{
    PluginInstance, PluginName, admitter, attribute_reporter, datalayer, decider, fairness, filter, picker, producer,
    profile_handler, request_parser, scorer, served_verifier,
};
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
        if let Some(s) = crate::config::error::closest(name, self.declared.iter().map(String::as_str)) {
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
    pub program_aware: std::sync::Arc<super::fairness::metrics::ProgramAwareMetrics>,
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
            program_aware: std::sync::Arc::new(super::fairness::metrics::ProgramAwareMetrics::register(registry)?),
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

/// Factory signature.
pub type Factory = fn(&PluginSpec, &BuildContext) -> Result<PluginInstance, BuildError>;

/// A registered type.
#[derive(Clone, Copy, Debug)]
pub struct Registration {
    /// Canonical type name.
    pub type_name: &'static str,
    /// Factory.
    pub factory: Factory,
    /// For an alias: the canonical type it stands for.
    pub alias_of: Option<&'static str>,
}

/// Type name -> registration.
#[derive(Debug, Default)]
pub struct Registry {
    types: HashMap<&'static str, Registration>,
    warned: HashMap<&'static str, Arc<AtomicBool>>,
}

impl Registry {
    /// Registers a type; a duplicate name is a programming error reported at startup.
    pub fn add(&mut self, type_name: &'static str, factory: Factory) -> &mut Self {
        let previous = self.types.insert(type_name, Registration { type_name, factory, alias_of: None });
        assert!(previous.is_none(), "plugin type {type_name} registered twice");
        self
    }

    /// Registers a deprecated alias of an already registered type.
    pub fn alias(&mut self, alias: &'static str, canonical: &'static str) -> &mut Self {
        let target = self.types.get(canonical).copied();
        let target = target.unwrap_or_else(|| panic!("alias {alias} of unregistered {canonical}"));
        self.types
            .insert(alias, Registration { type_name: canonical, factory: target.factory, alias_of: Some(canonical) });
        self.warned.insert(alias, Arc::new(AtomicBool::new(false)));
        self
    }

    /// Looks a type (or alias) up; logs a deprecation once per alias.
    pub fn get(&self, type_name: &str) -> Option<Registration> {
        let reg = self.types.get(type_name).copied()?;
        if let (Some(canonical), Some(flag)) = (reg.alias_of, self.warned.get(type_name))
            && !flag.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(alias = type_name, replacement = canonical, "Deprecated plugin type; it still loads");
        }
        Some(reg)
    }

    /// Every registered name (types and aliases), sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.types.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// True when the name is a deprecated alias.
    pub fn is_alias(&self, type_name: &str) -> bool {
        self.types.get(type_name).is_some_and(|r| r.alias_of.is_some())
    }
}

/// The built-in catalogue: the one list of every plugin type epp knows.
pub fn builtin() -> Registry {
    let mut r = Registry::default();
    r.add(profile_handler::single::TYPE, profile_handler::single::build)
        .add(picker::max_score::TYPE, picker::max_score::build)
        .add(picker::random::TYPE, picker::random::build)
        .add(picker::weighted_random::TYPE, picker::weighted_random::build)
        .add(scorer::queue::TYPE, scorer::queue::build)
        .add(scorer::kv_utilization::TYPE, scorer::kv_utilization::build)
        .add(scorer::prefix_cache::TYPE, scorer::prefix_cache::build)
        .add(scorer::running::TYPE, scorer::running::build)
        .add(scorer::lora::TYPE, scorer::lora::build)
        .add(scorer::load_aware::TYPE, scorer::load_aware::build)
        .add(scorer::active_request::TYPE, scorer::active_request::build)
        .add(scorer::token_load::TYPE, scorer::token_load::build)
        .add(scorer::no_hit_lru::TYPE, scorer::no_hit_lru::build)
        .add(scorer::session_affinity::TYPE, scorer::session_affinity::build)
        .add(scorer::context_length::TYPE, scorer::context_length::build)
        .add(producer::approx_prefix::TYPE, producer::approx_prefix::build)
        .add(producer::precise_prefix::TYPE, producer::precise_prefix::build)
        .add(scorer::precise_prefix::TYPE, scorer::precise_prefix::build)
        .add(producer::token::TYPE, producer::token::build)
        .add(producer::inflight::TYPE, producer::inflight::build)
        .add(producer::session_id::TYPE, producer::session_id::build)
        .add(producer::mm_cache::TYPE, producer::mm_cache::build)
        .add(scorer::mm_cache::TYPE, scorer::mm_cache::build)
        .add(producer::k8s_notification::TYPE, producer::k8s_notification::build)
        .add(filter::utilization::TYPE, filter::utilization::build)
        .add(filter::role::DECODE, filter::role::build_decode)
        .add(filter::role::PREFILL, filter::role::build_prefill)
        .add(filter::role::ENCODE, filter::role::build_encode)
        .add(filter::label_selector::TYPE, filter::label_selector::build)
        .add(filter::by_label::TYPE, filter::by_label::build)
        .add(filter::prefix_affinity::TYPE, filter::prefix_affinity::build)
        .add(filter::concurrency::TYPE, filter::concurrency::build)
        .add(filter::header_testing::TYPE, filter::header_testing::build)
        .add(served_verifier::TYPE, served_verifier::build)
        .add(attribute_reporter::TYPE, attribute_reporter::build)
        .add(datalayer::file_discovery::TYPE, datalayer::file_discovery::build)
        .add(datalayer::models::SOURCE_TYPE, datalayer::models::build_source)
        .add(datalayer::models::EXTRACTOR_TYPE, datalayer::models::build_extractor)
        .add(filter::served_model::TYPE, filter::served_model::build)
        .add(filter::slo_headroom_tier::TYPE, filter::slo_headroom_tier::build)
        .add(scorer::latency::TYPE, scorer::latency::build)
        .add(producer::predicted_latency::TYPE, producer::predicted_latency::build)
        .add(profile_handler::disagg::TYPE, profile_handler::disagg::build)
        .add(profile_handler::disagg::pd::TYPE, profile_handler::disagg::pd::build)
        .add(profile_handler::data_parallel::TYPE, profile_handler::data_parallel::build)
        .add(profile_handler::disagg_headers::TYPE, profile_handler::disagg_headers::build)
        .add(decider::ALWAYS_PD, decider::build_always)
        .add(decider::prefix_based::TYPE, decider::prefix_based::build)
        .add(decider::multimodal::TYPE, decider::multimodal::build)
        .add(admitter::latency_slo::TYPE, admitter::latency_slo::build)
        .add(admitter::probabilistic::TYPE, admitter::probabilistic::build)
        .add(fairness::program_aware::TYPE, fairness::program_aware::build);
    for (type_name, factory) in producer::passive::TYPES {
        r.add(type_name, *factory);
    }
    for (type_name, factory) in request_parser::TYPES {
        r.add(type_name, factory);
    }
    r.alias(scorer::kv_utilization::OLD_TYPE, scorer::kv_utilization::TYPE)
        .alias(producer::token::OLD_TYPE, producer::token::TYPE)
        .alias(profile_handler::disagg_headers::OLD_TYPE, profile_handler::disagg_headers::TYPE)
        .alias(filter::label_selector::OLD_TYPE, filter::label_selector::TYPE);
    r
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
