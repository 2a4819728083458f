//! Serde structs mirroring the EndpointPickerConfig document (both apiVersions). No logic;
//! every struct rejects unknown fields. Plugin `parameters` stay untyped until the plugin's
//! own factory decodes them.

use serde::Deserialize;

/// The whole document.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawConfig {
    /// `llm-d.ai/v1alpha1` or `inference.networking.x-k8s.io/v1alpha1`.
    pub api_version: Option<String>,
    /// `EndpointPickerConfig`.
    pub kind: Option<String>,
    /// Feature gates.
    #[serde(default)]
    pub feature_gates: Vec<String>,
    /// Plugin instances.
    #[serde(default)]
    pub plugins: Vec<RawPlugin>,
    /// Scheduling profiles.
    #[serde(default)]
    pub scheduling_profiles: Vec<RawProfile>,
    /// Saturation detector (reference, or the pre-v1.5 threshold form).
    pub saturation_detector: Option<RawSaturationDetector>,
    /// Data layer wiring (GIE v1.5 / llm-d).
    pub data_layer: Option<RawDataLayer>,
    /// Data layer wiring under its GIE v1.3/v1.4 key.
    pub data: Option<RawDataLayer>,
    /// Flow control (honoured only with the `flowControl` gate).
    pub flow_control: Option<RawFlowControl>,
    /// Request parser (GIE).
    pub parser: Option<RawPluginRef>,
    /// Request parsers (llm-d).
    pub request_handler: Option<RawRequestHandler>,
}

/// `plugins[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlugin {
    /// Instance name (defaults to the type).
    pub name: Option<String>,
    /// Registered type.
    #[serde(rename = "type")]
    pub type_name: Option<String>,
    /// Opaque parameters.
    pub parameters: Option<serde_yaml::Value>,
}

/// `schedulingProfiles[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// Profile name.
    pub name: Option<String>,
    /// Plugin references.
    #[serde(default)]
    pub plugins: Vec<RawProfilePlugin>,
}

/// `schedulingProfiles[].plugins[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawProfilePlugin {
    /// Referenced plugin name.
    pub plugin_ref: Option<String>,
    /// Scorer weight (default 1).
    pub weight: Option<f64>,
}

/// `{pluginRef: name}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPluginRef {
    /// Referenced plugin name.
    pub plugin_ref: Option<String>,
}

/// `saturationDetector` in either form.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSaturationDetector {
    /// `{pluginRef}` (GIE v1.5+).
    Ref(RawPluginRef),
    /// `{queueDepthThreshold, kvCacheUtilThreshold, metricsStalenessThreshold}` (<= v1.4).
    Legacy(RawLegacyThresholds),
}

/// Pre-v1.5 saturation thresholds.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLegacyThresholds {
    /// Queue threshold.
    pub queue_depth_threshold: Option<i64>,
    /// KV threshold.
    pub kv_cache_util_threshold: Option<f64>,
    /// Staleness threshold (duration string).
    pub metrics_staleness_threshold: Option<String>,
}

/// `dataLayer`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDataLayer {
    /// Data sources with their extractors.
    #[serde(default)]
    pub sources: Option<Vec<RawDataSource>>,
    /// Whether defaults are injected (llm-d).
    pub inject_defaults: Option<bool>,
    /// Endpoint discovery plugin (llm-d).
    pub discovery: Option<RawPluginRef>,
    /// Peer discovery plugin (llm-d).
    pub peer_discovery: Option<RawPluginRef>,
    /// Cross-replica syncer (llm-d).
    pub cross_replica_syncer_plugin_ref: Option<String>,
    /// Cross-replica sync interval (llm-d).
    pub cross_replica_sync_interval: Option<String>,
}

/// `dataLayer.sources[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDataSource {
    /// Source plugin.
    pub plugin_ref: Option<String>,
    /// Extractor plugins.
    #[serde(default)]
    pub extractors: Vec<RawPluginRef>,
}

/// `flowControl` (honoured only with the `flowControl` feature gate; see
/// `config::flow_control` for the validation and `flowcontrol` for the runtime).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFlowControl {
    /// Global byte limit (quantity).
    pub max_bytes: Option<serde_yaml::Value>,
    /// Global request limit (quantity).
    pub max_requests: Option<serde_yaml::Value>,
    /// Default TTL (duration).
    #[serde(rename = "defaultRequestTTL")]
    pub default_request_ttl: Option<String>,
    /// TTL when no endpoint exists (llm-d).
    #[serde(rename = "noEndpointRequestTTL")]
    pub no_endpoint_request_ttl: Option<String>,
    /// Default band.
    pub default_priority_band: Option<RawPriorityBand>,
    /// Default band for negative priorities (llm-d).
    pub default_negative_priority_band: Option<RawPriorityBand>,
    /// Bands.
    pub priority_bands: Option<Vec<RawPriorityBand>>,
    /// Usage limit policy.
    pub usage_limit_policy_plugin_ref: Option<String>,
    /// Saturation detector (llm-d location).
    pub saturation_detector: Option<RawPluginRef>,
    /// In-flight eviction (llm-d).
    pub enable_eviction: Option<bool>,
}

/// `flowControl.defaultPriorityBand`, `defaultNegativePriorityBand` and `priorityBands[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPriorityBand {
    /// Priority (bands only; ignored in the templates).
    pub priority: Option<i32>,
    /// Byte limit (quantity).
    pub max_bytes: Option<serde_yaml::Value>,
    /// Request limit (quantity).
    pub max_requests: Option<serde_yaml::Value>,
    /// Band TTL (duration; llm-d).
    #[serde(rename = "defaultRequestTTL")]
    pub default_request_ttl: Option<String>,
    /// Fairness policy plugin.
    pub fairness_policy_ref: Option<String>,
    /// Ordering policy plugin.
    pub ordering_policy_ref: Option<String>,
}

/// `requestHandler` (llm-d).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestHandler {
    /// Parsers.
    #[serde(default)]
    pub parsers: Vec<RawPluginRef>,
}
