//! The Go EPPs' scrape flags -> the scraper's settings (wiring: it reads the data-layer
//! plugins' parameters and writes `endpoints` types, so it sits above both): the legacy metric-name flags
//! (`--total-queued-requests-metric`, `--total-running-requests-metric`,
//! `--kv-cache-usage-percentage-metric`, `--lora-info-metric`, `--cache-info-metric`) and
//! `--model-server-metrics-{scheme,path,port,https-insecure-skip-verify}`.
//!
//! Rules: a metric flag replaces that metric of the default engine's mapping (the engine of
//! pods without an engine label; `vllm` unless the config says otherwise); an empty value
//! disables the metric. Where the EndpointPickerConfig sets the same thing (an `engineConfigs`
//! entry for the default engine, or a `metrics-data-source` scheme, path or
//! `insecureSkipVerify` different from its default), the config wins and a warning names both.

use std::collections::HashMap;

use crate::endpoints::metric_spec::{MetricSpec, SpecError, parse_optional_spec};
use crate::endpoints::vllm_metrics::{BUILTIN_ENGINES, EngineMapping, builtin_engine};
use crate::plugins::producer::passive::{CoreMetricsExtractorParams, MetricsDataSourceParams};

/// Where in a mapping a metric flag writes.
type SpecSlot = fn(&mut EngineMapping) -> &mut Option<MetricSpec>;

/// The scrape flags as given (`None` = not on the command line).
#[derive(Clone, Debug, Default)]
pub struct ScrapeFlags {
    /// `--total-queued-requests-metric`.
    pub queued: Option<String>,
    /// `--total-running-requests-metric`.
    pub running: Option<String>,
    /// `--kv-cache-usage-percentage-metric`.
    pub kv_usage: Option<String>,
    /// `--lora-info-metric`.
    pub lora: Option<String>,
    /// `--cache-info-metric`.
    pub cache_info: Option<String>,
    /// `--model-server-metrics-scheme https`.
    pub https: bool,
    /// `--model-server-metrics-path`.
    pub path: Option<String>,
    /// `--model-server-metrics-port` (non-zero).
    pub port: Option<u16>,
    /// `--model-server-metrics-https-insecure-skip-verify`.
    pub insecure_skip_verify: bool,
}

/// Where and how the scraper fetches, after flags and config are combined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeTarget {
    /// HTTPS instead of HTTP.
    pub https: bool,
    /// Skip certificate verification (HTTPS only).
    pub insecure_skip_verify: bool,
    /// URL path.
    pub path: String,
    /// Port override.
    pub port: Option<u16>,
}

/// A bad metric flag value.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {error}")]
pub struct FlagError {
    /// The flag.
    pub flag: &'static str,
    /// Why its selector is invalid.
    pub error: SpecError,
}

impl ScrapeFlags {
    /// Scheme, path and port: config where it departs from its defaults, else the flags.
    pub fn target(&self, source: &MetricsDataSourceParams, warnings: &mut Vec<String>) -> ScrapeTarget {
        let defaults = MetricsDataSourceParams::default();
        let config_https = source.scheme.eq_ignore_ascii_case("https");
        let https = if source.scheme != defaults.scheme {
            if !self.https {
                warnings.push(format!(
                    "--model-server-metrics-scheme=http ignored: metrics-data-source sets scheme {}",
                    source.scheme
                ));
            }
            config_https
        } else {
            self.https
        };
        let insecure_skip_verify = if source.insecure_skip_verify != defaults.insecure_skip_verify {
            source.insecure_skip_verify
        } else {
            self.insecure_skip_verify
        };
        let path = match &self.path {
            Some(flag) if source.path != defaults.path && *flag != source.path => {
                warnings.push(format!(
                    "--model-server-metrics-path={flag} ignored: metrics-data-source sets path {}",
                    source.path
                ));
                source.path.clone()
            }
            Some(flag) if source.path == defaults.path => flag.clone(),
            _ => source.path.clone(),
        };
        ScrapeTarget { https, insecure_skip_verify, path, port: self.port }
    }

    /// Applies the metric flags to the default engine's mapping in `engines` (which already
    /// holds the built-ins and the config's `engineConfigs`).
    pub fn apply_metrics(
        &self,
        engines: &mut HashMap<String, EngineMapping>,
        extractor: &CoreMetricsExtractorParams,
        warnings: &mut Vec<String>,
    ) -> Result<(), FlagError> {
        let default = extractor.default_engine.as_str();
        let from_config = extractor.engine_configs.iter().any(|e| e.name == default);
        let mut mapping =
            engines.get(default).cloned().or_else(|| builtin_engine(default)).unwrap_or_else(|| EngineMapping {
                cache_block_size_label: "block_size".into(),
                cache_num_blocks_label: "num_gpu_blocks".into(),
                ..EngineMapping::disabled(default)
            });
        let flags: [(&'static str, &Option<String>, SpecSlot); 5] = [
            ("--total-queued-requests-metric", &self.queued, |m| &mut m.queued),
            ("--total-running-requests-metric", &self.running, |m| &mut m.running),
            ("--kv-cache-usage-percentage-metric", &self.kv_usage, |m| &mut m.kv_usage),
            ("--lora-info-metric", &self.lora, |m| &mut m.lora),
            ("--cache-info-metric", &self.cache_info, |m| &mut m.cache_info),
        ];
        let mut changed = false;
        for (flag, value, field) in flags {
            let Some(value) = value else { continue };
            let spec = parse_optional_spec(value).map_err(|error| FlagError { flag, error })?;
            let slot = field(&mut mapping);
            if *slot == spec {
                continue;
            }
            if from_config {
                let config = slot.as_ref().map_or_else(|| "(disabled)".to_string(), |s| s.to_string());
                warnings.push(format!(
                    "{flag}={value} ignored: core-metrics-extractor engineConfigs entry {default:?} sets it to {config}"
                ));
                continue;
            }
            *slot = spec;
            changed = true;
        }
        if !changed {
            return Ok(());
        }
        let builtin = builtin_engine(default);
        if builtin.as_ref().is_some_and(|b| b.kv_usage != mapping.kv_usage) {
            // The fallback is the older name of the built-in metric, not of the flag's.
            mapping.kv_usage_fallback = None;
        }
        if let Some(family) = mapping.cache_info.as_ref().map(|s| s.name.clone()) {
            adopt_cache_info_labels(&mut mapping, family);
        }
        engines.insert(default.to_string(), mapping);
        Ok(())
    }
}

/// When the cache-info family is a built-in engine's, its block-size and block-count labels
/// are that engine's (sglang: `page_size`, `num_pages`).
fn adopt_cache_info_labels(mapping: &mut EngineMapping, family: String) {
    let owner = BUILTIN_ENGINES
        .iter()
        .filter_map(|name| builtin_engine(name))
        .find(|b| b.cache_info.as_ref().is_some_and(|s| s.name == family));
    if let Some(owner) = owner {
        mapping.cache_block_size_label = owner.cache_block_size_label;
        mapping.cache_num_blocks_label = owner.cache_num_blocks_label;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::metric_spec::parse_spec;
    use crate::plugins::producer::passive::EngineConfig;

    fn engines() -> HashMap<String, EngineMapping> {
        BUILTIN_ENGINES.iter().map(|n| (n.to_string(), builtin_engine(n).unwrap())).collect()
    }

    #[test]
    fn flags_replace_the_default_engines_metrics() {
        let flags = ScrapeFlags {
            queued: Some("nv_trt_llm_request_metrics{request_type=waiting}".into()),
            kv_usage: Some("sglang:token_usage".into()),
            cache_info: Some("sglang:cache_config_info".into()),
            lora: Some(String::new()),
            ..Default::default()
        };
        let mut engines = engines();
        let mut warnings = Vec::new();
        flags.apply_metrics(&mut engines, &CoreMetricsExtractorParams::default(), &mut warnings).unwrap();
        let vllm = &engines["vllm"];
        assert_eq!(vllm.queued, Some(parse_spec("nv_trt_llm_request_metrics{request_type=\"waiting\"}").unwrap()));
        assert_eq!(vllm.running, builtin_engine("vllm").unwrap().running);
        assert_eq!(vllm.kv_usage, Some(MetricSpec::new("sglang:token_usage")));
        assert_eq!(vllm.kv_usage_fallback, None);
        assert_eq!(vllm.lora, None);
        assert_eq!(
            (vllm.cache_block_size_label.as_str(), vllm.cache_num_blocks_label.as_str()),
            ("page_size", "num_pages")
        );
        assert!(warnings.is_empty());
        let bad = ScrapeFlags { running: Some("m{a!=b}".into()), ..Default::default() };
        let err = bad.apply_metrics(&mut engines, &CoreMetricsExtractorParams::default(), &mut warnings).unwrap_err();
        assert!(err.to_string().starts_with("--total-running-requests-metric"), "{err}");
    }

    #[test]
    fn config_wins_with_a_warning_naming_both() {
        let extractor = CoreMetricsExtractorParams {
            engine_configs: vec![EngineConfig {
                name: "vllm".into(),
                kv_usage_spec: Some("custom:kv".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut engines = engines();
        engines.insert("vllm".into(), extractor.engine_configs[0].to_mapping().unwrap());
        let flags = ScrapeFlags { kv_usage: Some("sglang:token_usage".into()), ..Default::default() };
        let mut warnings = Vec::new();
        flags.apply_metrics(&mut engines, &extractor, &mut warnings).unwrap();
        assert_eq!(engines["vllm"].kv_usage, Some(MetricSpec::new("custom:kv")));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("--kv-cache-usage-percentage-metric=sglang:token_usage"), "{warnings:?}");
        assert!(warnings[0].contains("custom:kv"), "{warnings:?}");
    }

    #[test]
    fn target_combines_flags_and_config() {
        let flags = ScrapeFlags {
            https: true,
            path: Some("/prometheus/metrics".into()),
            port: Some(9400),
            insecure_skip_verify: false,
            ..Default::default()
        };
        let mut warnings = Vec::new();
        let t = flags.target(&MetricsDataSourceParams::default(), &mut warnings);
        assert_eq!(
            t,
            ScrapeTarget {
                https: true,
                insecure_skip_verify: false,
                path: "/prometheus/metrics".into(),
                port: Some(9400)
            }
        );
        let config = MetricsDataSourceParams { path: "/custom".into(), ..Default::default() };
        let t = flags.target(&config, &mut warnings);
        assert_eq!(t.path, "/custom");
        assert!(warnings[0].contains("/prometheus/metrics") && warnings[0].contains("/custom"), "{warnings:?}");
    }
}
