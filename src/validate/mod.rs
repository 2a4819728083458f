//! `epp validate FILE...`: checks EndpointPickerConfig files, KServe LLMInferenceService
//! manifests (`serving.kserve.io/v1alpha1` and `v1alpha2`, multi-document YAML), and the
//! documents that embed a config (ConfigMaps, LLMInferenceServiceConfigs: `embedded`) before
//! they reach a cluster. A config goes through the real loader; a manifest's
//! `spec.router.scheduler.config.inline` does too, and the manifest is cross-checked against
//! the known pitfalls (`manifest`, `precise`). Each finding has a severity, a path inside its
//! document, a message and a fix. Pure: reads text, returns findings; the CLI does the I/O.

pub mod embedded;
pub mod labels;
pub mod manifest;
pub mod precise;
pub mod vllm;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use crate::framework::build::BuildContext;

use crate::plugins::registry::builtin;
use crate::scheduling::metrics::SchedulerMetrics;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Will not work as written.
    Error,
    /// Works, but probably not as intended.
    Warning,
}

/// One problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Severity.
    pub severity: Severity,
    /// Document index within the file (0-based).
    pub document: usize,
    /// Path inside the document, e.g. `spec.worker.initContainers`.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

impl Finding {
    /// An error.
    pub fn error(path: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { severity: Severity::Error, document: 0, path: path.into(), message: message.into(), fix: fix.into() }
    }
    /// A warning.
    pub fn warning(path: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { severity: Severity::Warning, ..Self::error(path, message, fix) }
    }
}

/// API versions of LLMInferenceService this validator reads.
pub const KSERVE_API_VERSIONS: &[&str] = &["serving.kserve.io/v1alpha1", "serving.kserve.io/v1alpha2"];

/// Validates the text of one file (one or more YAML documents).
pub fn validate_text(text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let findings = match Value::deserialize(doc) {
            Ok(Value::Null) => Vec::new(),
            Ok(value) => validate_document(&value),
            Err(e) => vec![Finding::error("<document>", format!("not valid YAML: {e}"), "fix the YAML syntax")],
        };
        out.extend(findings.into_iter().map(|f| Finding { document: i, ..f }));
    }
    out
}

fn validate_document(doc: &Value) -> Vec<Finding> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "LLMInferenceService" => manifest::check(doc),
        "LLMInferenceServiceConfig" => embedded::llmisvc_config(doc),
        "ConfigMap" => embedded::config_map(doc),
        "EndpointPickerConfig" | "" => config_findings(doc, ""),
        other => vec![Finding::warning(
            "kind",
            format!("kind {other:?} is not checked"),
            "pass EndpointPickerConfig files, ConfigMaps holding one, or KServe LLMInferenceService(Config) manifests",
        )],
    }
}

/// Runs a config document through the real loader; loader errors become findings under
/// `prefix`.
pub fn config_findings(config: &Value, prefix: &str) -> Vec<Finding> {
    let text = match serde_yaml::to_string(config) {
        Ok(t) => t,
        Err(e) => return vec![Finding::error(prefix.trim_end_matches('.'), e.to_string(), "fix the YAML")],
    };
    match crate::config::load(&text, &builtin(), &BuildContext::default(), SchedulerMetrics::detached()) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .0
            .into_iter()
            .map(|e| {
                let fix = e.suggestion.clone().unwrap_or_else(|| "see docs/config.md".into());
                Finding::error(format!("{prefix}{}", e.path), e.message, fix)
            })
            .collect(),
    }
}

/// Output format of the CLI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One line per finding plus a summary.
    #[default]
    Human,
    /// A JSON array of `{file, severity, document, path, message, fix}`.
    Json,
}

#[derive(Serialize)]
struct FileFinding<'a> {
    file: &'a str,
    #[serde(flatten)]
    finding: &'a Finding,
}

/// Renders findings of several files.
pub fn render(results: &[(String, Vec<Finding>)], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => {
            let all: Vec<FileFinding<'_>> = results
                .iter()
                .flat_map(|(file, fs)| fs.iter().map(move |finding| FileFinding { file, finding }))
                .collect();
            serde_json::to_string_pretty(&all).unwrap_or_else(|_| "[]".into())
        }
        OutputFormat::Human => {
            let mut s = String::new();
            for (file, findings) in results {
                if findings.is_empty() {
                    s.push_str(&format!("{file}: ok\n"));
                }
                for f in findings {
                    let sev = match f.severity {
                        Severity::Error => "error",
                        Severity::Warning => "warning",
                    };
                    s.push_str(&format!(
                        "{file} [doc {}] {sev}: {}: {}\n    fix: {}\n",
                        f.document, f.path, f.message, f.fix
                    ));
                }
            }
            let count = |sev| results.iter().flat_map(|(_, f)| f).filter(|f| f.severity == sev).count();
            s.push_str(&format!("{} error(s), {} warning(s)\n", count(Severity::Error), count(Severity::Warning)));
            s
        }
    }
}

/// True when any finding is an error (the CLI then exits non-zero).
pub fn has_errors(results: &[(String, Vec<Finding>)]) -> bool {
    results.iter().flat_map(|(_, f)| f).any(|f| f.severity == Severity::Error)
}

/// Dotted path of a child.
pub(crate) fn join(base: &str, key: &str) -> String {
    if base.is_empty() { key.to_string() } else { format!("{base}.{key}") }
}

/// Walks `keys` from `v`.
pub(crate) fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}
