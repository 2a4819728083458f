//! Documents that carry an EndpointPickerConfig inside them: a Kubernetes ConfigMap mounted at
//! the EPP's `/config` (each `data` value that is an EndpointPickerConfig goes through the real
//! loader) and a KServe LLMInferenceServiceConfig (its inline scheduler config, as in an
//! LLMInferenceService, and the scheduler container's image when it overrides one).

use serde_yaml::Value;

use super::{Finding, at, config_findings};

/// Findings for a ConfigMap: every `data` value whose YAML is an EndpointPickerConfig is
/// loaded; a ConfigMap holding none is worth a warning (it was passed to be checked).
pub fn config_map(doc: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut configs = 0;
    let data = doc.get("data").and_then(Value::as_mapping).into_iter().flatten();
    for (key, value) in data {
        let (Some(key), Some(text)) = (key.as_str(), value.as_str()) else { continue };
        let Ok(parsed) = serde_yaml::from_str::<Value>(text) else { continue };
        if parsed.get("kind").and_then(Value::as_str) != Some("EndpointPickerConfig") {
            continue;
        }
        configs += 1;
        out.extend(config_findings(&parsed, &format!("data.{key}.")));
    }
    if configs == 0 {
        out.push(Finding::warning(
            "data",
            "no data value is an EndpointPickerConfig (a YAML document with kind: EndpointPickerConfig)",
            "put the config under a key such as config.yaml and mount it where --config-file points",
        ));
    }
    out
}

/// Findings for an LLMInferenceServiceConfig: the apiVersion, the inline scheduler config, and
/// an empty image on the scheduler's `main` container.
pub fn llmisvc_config(doc: &Value) -> Vec<Finding> {
    let mut out = super::manifest::api_version_and_inline_config(doc);
    let containers = at(doc, &["spec", "router", "scheduler", "template", "containers"]).and_then(Value::as_sequence);
    for (i, container) in containers.into_iter().flatten().enumerate() {
        if container.get("name").and_then(Value::as_str) != Some("main") {
            continue;
        }
        if container.get("image").and_then(Value::as_str).is_some_and(|image| image.trim().is_empty()) {
            out.push(Finding::error(
                format!("spec.router.scheduler.template.containers[{i}].image"),
                "the scheduler image is empty",
                "name the epp image, e.g. <registry>/epp:<tag>, or leave the field out to keep KServe's",
            ));
        }
    }
    out
}
