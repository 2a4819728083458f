//! `models-data-source` and `models-data-extractor` (llm-d): poll each endpoint's OpenAI
//! `GET /v1/models` and keep the list (base model and LoRA adapters, with `parent`) per
//! endpoint, for `served-model-filter`.
//!
//! `models-data-source` parameters: `scheme` (`http`; `https` is rejected as for
//! `metrics-data-source`), `path` (`/v1/models`), `insecureSkipVerify` (`true`), `interval`
//! (Go duration; default `--refresh-metrics-interval`). `models-data-extractor` takes none.
//! Polling runs when both are declared (the source fetches, the extractor stores); the
//! loader reads the parameters into `DataLayerSettings::models` and the app starts
//! `endpoints::served_models`.

use std::time::Duration;

use serde::Deserialize;

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::PluginInstance;
use crate::plugins::producer::passive::NoParams;

/// Source type name.
pub const SOURCE_TYPE: &str = "models-data-source";
/// Extractor type name.
pub const EXTRACTOR_TYPE: &str = "models-data-extractor";

/// `models-data-source` parameters.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceParams {
    /// `http` or `https`.
    pub scheme: String,
    /// URL path.
    pub path: String,
    /// Skip TLS verification for https.
    pub insecure_skip_verify: bool,
    /// Poll period; `None` = the metrics refresh interval.
    #[serde(deserialize_with = "de_opt_duration")]
    pub interval: Option<Duration>,
}

impl Default for SourceParams {
    fn default() -> Self {
        Self { scheme: "http".into(), path: "/v1/models".into(), insecure_skip_verify: true, interval: None }
    }
}

fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    crate::framework::build::de_duration(d).map(Some)
}

/// Decodes and checks `models-data-source` parameters (shared by the factory and the loader).
pub fn source_params(spec: &PluginSpec) -> Result<SourceParams, BuildError> {
    let p: SourceParams = decode_params(spec)?;
    let at = |field: &str| format!("{}.parameters.{field}", spec.path);
    match p.scheme.as_str() {
        "http" => {}
        "https" => return Err(BuildError::new(at("scheme"), "https polling is not supported yet; use http")),
        other => return Err(BuildError::new(at("scheme"), format!("must be http or https, not {other:?}"))),
    }
    if !p.path.starts_with('/') {
        return Err(BuildError::new(at("path"), "must start with `/`"));
    }
    if p.interval.is_some_and(|i| i.is_zero()) {
        return Err(BuildError::new(at("interval"), "must be positive"));
    }
    Ok(p)
}

/// `models-data-source` factory.
pub fn build_source(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    source_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), SOURCE_TYPE).passive())
}

/// `models-data-extractor` factory (no parameters).
pub fn build_extractor(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), EXTRACTOR_TYPE).passive())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(parameters: serde_json::Value) -> PluginSpec {
        PluginSpec { name: "m".into(), type_name: SOURCE_TYPE.into(), parameters, path: "plugins[1]".into() }
    }

    #[test]
    fn source_defaults_and_errors() {
        assert_eq!(source_params(&spec(serde_json::Value::Null)).unwrap(), SourceParams::default());
        let p =
            source_params(&spec(json!({"path": "/models", "interval": "5s", "insecureSkipVerify": false}))).unwrap();
        assert_eq!((p.path.as_str(), p.interval), ("/models", Some(Duration::from_secs(5))));
        let err = |v| source_params(&spec(v)).unwrap_err().path;
        assert_eq!(err(json!({"scheme": "https"})), "plugins[1].parameters.scheme");
        assert_eq!(err(json!({"scheme": "ftp"})), "plugins[1].parameters.scheme");
        assert_eq!(err(json!({"path": "v1/models"})), "plugins[1].parameters.path");
        assert_eq!(err(json!({"interval": "0s"})), "plugins[1].parameters.interval");
        assert_eq!(err(json!({"interval": "soon"})), "plugins[1].parameters");
        assert_eq!(err(json!({"port": 1})), "plugins[1].parameters");
        let extractor = |v| build_extractor(&spec(v), &BuildContext::default());
        assert!(extractor(serde_json::Value::Null).unwrap().passive);
        assert!(extractor(json!({"x": 1})).is_err());
    }
}
