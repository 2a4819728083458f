//! Passive plugins: types that EndpointPickerConfig files name for the data layer and flow
//! control. They load with strictly checked parameters so existing configs work; the scheduler
//! does not call them. The stateless Flow Control policies (`*-ordering-policy`,
//! `*-fairness-policy`) act through `flowControl` band references, which `config::flow_control`
//! maps to `flowcontrol::settings`. `metrics-data-source` and `core-metrics-extractor`
//! parameters configure the scraper (read by the app from the validated config).

use serde::Deserialize;

use crate::endpoints::metric_spec::{SpecError, parse_optional_spec};
use crate::endpoints::vllm_metrics::EngineMapping;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::PluginInstance;
use crate::plugins::registry::Factory;

/// Parameters of plugins that take none: any key is an error.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `metrics-data-source` parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsDataSourceParams {
    /// `http` or `https`.
    pub scheme: String,
    /// URL path.
    pub path: String,
    /// Skip TLS verification for https.
    pub insecure_skip_verify: bool,
}

impl Default for MetricsDataSourceParams {
    fn default() -> Self {
        Self { scheme: "http".into(), path: "/metrics".into(), insecure_skip_verify: true }
    }
}

/// One `engineConfigs[]` entry of `core-metrics-extractor`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineConfig {
    /// Engine name (`default` is reserved).
    pub name: String,
    /// Queued requests spec.
    pub queued_requests_spec: Option<String>,
    /// Running requests spec.
    pub running_requests_spec: Option<String>,
    /// KV usage spec.
    pub kv_usage_spec: Option<String>,
    /// LoRA info spec.
    pub lora_spec: Option<String>,
    /// Cache info spec.
    pub cache_info_spec: Option<String>,
    /// Label of the cache info metric holding the block size.
    pub cache_block_size_label_name: Option<String>,
    /// Label of the cache info metric holding the block count.
    pub cache_num_blocks_label_name: Option<String>,
    /// Gauge with the block size.
    pub cache_block_size_spec: Option<String>,
    /// Gauge with the block count.
    pub cache_num_blocks_spec: Option<String>,
}

impl EngineConfig {
    /// The engine mapping this entry defines. The entry replaces a built-in of the same name
    /// wholesale: an unset or empty spec disables that metric.
    pub fn to_mapping(&self) -> Result<EngineMapping, SpecError> {
        let spec = |s: &Option<String>| s.as_deref().map(parse_optional_spec).transpose().map(Option::flatten);
        Ok(EngineMapping {
            name: self.name.clone(),
            queued: spec(&self.queued_requests_spec)?,
            running: spec(&self.running_requests_spec)?,
            kv_usage: spec(&self.kv_usage_spec)?,
            kv_usage_fallback: None,
            lora: spec(&self.lora_spec)?,
            cache_info: spec(&self.cache_info_spec)?,
            cache_block_size_label: self.cache_block_size_label_name.clone().unwrap_or_else(|| "block_size".into()),
            cache_num_blocks_label: self.cache_num_blocks_label_name.clone().unwrap_or_else(|| "num_gpu_blocks".into()),
            cache_block_size_spec: spec(&self.cache_block_size_spec)?,
            cache_num_blocks_spec: spec(&self.cache_num_blocks_spec)?,
        })
    }
}

/// `core-metrics-extractor` parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CoreMetricsExtractorParams {
    /// Pod label naming the engine.
    pub engine_label_key: String,
    /// Engine when the label is absent.
    pub default_engine: String,
    /// Custom or replacement engine mappings.
    pub engine_configs: Vec<EngineConfig>,
}

impl Default for CoreMetricsExtractorParams {
    fn default() -> Self {
        Self {
            engine_label_key: "llm-d.ai/engine-type".into(),
            default_engine: "vllm".into(),
            engine_configs: Vec::new(),
        }
    }
}

fn no_params(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), leak_type(&spec.type_name)).passive())
}

fn any_params(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    Ok(PluginInstance::new(spec.name.clone(), leak_type(&spec.type_name)).passive())
}

fn metrics_data_source(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: MetricsDataSourceParams = decode_params(spec)?;
    if p.scheme != "http" && p.scheme != "https" {
        return Err(BuildError::new(format!("{}.parameters.scheme", spec.path), "must be http or https"));
    }
    if p.scheme == "https" {
        return Err(BuildError::new(
            format!("{}.parameters.scheme", spec.path),
            "https scraping is not supported yet; use http",
        ));
    }
    Ok(PluginInstance::new(spec.name.clone(), "metrics-data-source").passive())
}

fn core_metrics_extractor(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: CoreMetricsExtractorParams = decode_params(spec)?;
    for (i, e) in p.engine_configs.iter().enumerate() {
        if e.name.is_empty() || e.name == "default" {
            return Err(BuildError::new(
                format!("{}.parameters.engineConfigs[{i}].name", spec.path),
                "must be set and must not be the reserved name `default`",
            ));
        }
        if let Err(error) = e.to_mapping() {
            return Err(BuildError::new(format!("{}.parameters.engineConfigs[{i}]", spec.path), error.to_string()));
        }
    }
    Ok(PluginInstance::new(spec.name.clone(), "core-metrics-extractor").passive())
}

/// Maps a passive type name to its static spelling (the registry only calls these factories
/// for names in [`TYPES`]).
fn leak_type(name: &str) -> &'static str {
    TYPES.iter().map(|(n, _)| *n).find(|n| *n == name).unwrap_or("passive")
}

/// Passive types and their factories. Policies take parameters we do not interpret yet, so
/// they accept any; the rest take none.
pub const TYPES: &[(&str, Factory)] = &[
    ("metrics-data-source", metrics_data_source),
    ("core-metrics-extractor", core_metrics_extractor),
    ("endpoint-notification-source", no_params),
    ("fcfs-ordering-policy", no_params),
    ("edf-ordering-policy", no_params),
    ("slo-deadline-ordering-policy", no_params),
    ("global-strict-fairness-policy", no_params),
    ("round-robin-fairness-policy", no_params),
    ("static-usage-limit-policy", any_params),
];
