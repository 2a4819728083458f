//! The built-in default EndpointPickerConfig (used when neither `--config-file` nor
//! `--config-text` is given), parsed by the normal loader path. Same pipeline as GIE and
//! llm-d: queue x2, KV utilisation x2, prefix cache x3 (fed by the approximate producer,
//! created automatically), metrics scraped by the default data layer.

/// The default config text.
pub const DEFAULT_CONFIG: &str = r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
"#;
