//! `request-attribute-reporter` (GIE): computes a number from the response's token usage with
//! a CEL expression and returns it to Envoy as dynamic metadata on the final response message
//! (e.g. for rate limiting or billing filters that read `envoy.lb`).
//!
//! Parameters: `attributes: [{key: {namespace (default "envoy.lb"), name}, expression,
//! condition (optional)}]`. Expressions see one variable, `usage`, a map built like GIE's
//! `google.protobuf.Struct` of the usage: `prompt_tokens`, `completion_tokens`,
//! `total_tokens` (always present, **doubles**, as JSON numbers are) and
//! `prompt_token_details.cached_tokens` (only when the server reported cached tokens; also
//! reachable as `prompt_tokens_details`). Both are compiled at config load (see [`crate::cel`]);
//! a syntax or type error fails the load with the parameter's path.
//!
//! At the end of each response: no usage -> nothing; `condition` not `true` (false, not a
//! bool, or an error) -> nothing; `expression` must give an int, uint or double (truncated to
//! an integer); 0 is not reported (as in GIE); errors are logged at debug and counted.
//! Metric: `epp_request_attribute_reports_total{plugin_name, outcome}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::IntCounter;
use serde::Deserialize;
use tracing::debug;

use crate::cel::{Program, Value};
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::{PluginInstance, ResponseHook};
use crate::framework::result::{MetadataEdits, SchedulingResult};
use crate::request::InferenceRequest;
use crate::request::usage::Usage;

/// Registered type name.
pub const TYPE: &str = "request-attribute-reporter";
/// Namespace used when `key.namespace` is empty.
pub const DEFAULT_NAMESPACE: &str = "envoy.lb";
/// The one variable expressions may use.
const USAGE_VAR: &str = "usage";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Attributes to report (at least one).
    pub attributes: Vec<AttributeParams>,
}

/// One `attributes[]` entry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AttributeParams {
    /// Where the value goes in the dynamic metadata.
    pub key: KeyParams,
    /// CEL expression giving a number.
    pub expression: String,
    /// Optional CEL expression; the attribute is reported only when it is `true`.
    pub condition: String,
}

/// `attributes[].key`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyParams {
    /// Top-level metadata namespace (default `envoy.lb`).
    pub namespace: String,
    /// Key inside the namespace (required).
    pub name: String,
}

/// What happened to one attribute at the end of one response (the metric's `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value was written.
    Reported,
    /// The value was 0 (not written, as in GIE).
    Zero,
    /// The condition was false or not a bool.
    ConditionFalse,
    /// The response reported no usage.
    NoUsage,
    /// The condition or expression failed, or the result was not a number.
    Error,
}

impl Outcome {
    const ALL: [Outcome; 5] =
        [Outcome::Reported, Outcome::Zero, Outcome::ConditionFalse, Outcome::NoUsage, Outcome::Error];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Reported => "reported",
            Outcome::Zero => "zero",
            Outcome::ConditionFalse => "condition_false",
            Outcome::NoUsage => "no_usage",
            Outcome::Error => "error",
        }
    }
}

#[derive(Debug)]
struct Attribute {
    namespace: String,
    name: String,
    expression: Program,
    condition: Option<Program>,
}

/// The plugin: a response hook.
#[derive(Debug)]
pub struct AttributeReporter {
    attributes: Vec<Attribute>,
    /// One counter per outcome, resolved once.
    outcomes: Vec<(Outcome, IntCounter)>,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |rest: &str| format!("{}.parameters.{rest}", spec.path);
    if p.attributes.is_empty() {
        return Err(BuildError::new(at("attributes"), "must contain at least one entry"));
    }
    let mut attributes = Vec::with_capacity(p.attributes.len());
    for (i, a) in p.attributes.into_iter().enumerate() {
        if a.key.name.is_empty() {
            return Err(BuildError::new(at(&format!("attributes[{i}].key.name")), "must not be empty"));
        }
        if a.expression.trim().is_empty() {
            return Err(BuildError::new(at(&format!("attributes[{i}].expression")), "must not be empty"));
        }
        let compile = |field: &str, src: &str| {
            Program::compile(src, &[USAGE_VAR])
                .map_err(|e| BuildError::new(at(&format!("attributes[{i}].{field}")), format!("invalid CEL: {e}")))
        };
        let expression = compile("expression", &a.expression)?;
        let condition = match a.condition.trim() {
            "" => None,
            c => Some(compile("condition", c)?),
        };
        let namespace = if a.key.namespace.is_empty() { DEFAULT_NAMESPACE.to_string() } else { a.key.namespace };
        attributes.push(Attribute { namespace, name: a.key.name, expression, condition });
    }
    let family = &cx.metrics.attribute_reports;
    let outcomes = Outcome::ALL.iter().map(|o| (*o, family.with_label_values(&[&*spec.name, o.as_str()]))).collect();
    let plugin = Arc::new(AttributeReporter { attributes, outcomes });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_response(plugin))
}

/// The `usage` variable: GIE marshals its usage struct to JSON and reads it back as a
/// `google.protobuf.Struct`, so every count is a double and the three totals always exist.
pub fn usage_value(usage: &Usage) -> Value {
    let num = |n: u64| Value::Double(n as f64);
    let mut m = BTreeMap::from([
        ("prompt_tokens".to_string(), num(usage.prompt_tokens)),
        ("completion_tokens".to_string(), num(usage.completion_tokens)),
        ("total_tokens".to_string(), num(usage.prompt_tokens.saturating_add(usage.completion_tokens))),
    ]);
    if let Some(cached) = usage.cached_tokens {
        let details = Value::Map(BTreeMap::from([("cached_tokens".to_string(), num(cached))]));
        m.insert("prompt_tokens_details".to_string(), details.clone());
        m.insert("prompt_token_details".to_string(), details);
    }
    Value::Map(m)
}

impl AttributeReporter {
    fn count(&self, outcome: Outcome) {
        if let Some((_, c)) = self.outcomes.iter().find(|(o, _)| *o == outcome) {
            c.inc();
        }
    }

    /// Evaluates one attribute: the outcome, and the value to report when there is one.
    fn value_of(&self, a: &Attribute, vars: &BTreeMap<&str, Value>) -> (Outcome, Option<i64>) {
        if let Some(condition) = &a.condition {
            match condition.eval(vars) {
                Ok(Value::Bool(true)) => {}
                Ok(_) => return (Outcome::ConditionFalse, None),
                Err(error) => {
                    debug!(%error, condition = condition.source(), "Attribute condition failed");
                    return (Outcome::Error, None);
                }
            }
        }
        let value = match a.expression.eval(vars) {
            Ok(Value::Int(i)) => i,
            Ok(Value::Uint(u)) => i64::try_from(u).unwrap_or(i64::MAX),
            // Saturating float -> int cast, truncating toward zero like Go's int64(float64).
            Ok(Value::Double(d)) if d.is_finite() => d as i64,
            Ok(other) => {
                debug!(result = %other, expression = a.expression.source(), "Attribute expression is not a number");
                return (Outcome::Error, None);
            }
            Err(error) => {
                debug!(%error, expression = a.expression.source(), "Attribute expression failed");
                return (Outcome::Error, None);
            }
        };
        if value == 0 { (Outcome::Zero, None) } else { (Outcome::Reported, Some(value)) }
    }
}

impl ResponseHook for AttributeReporter {
    fn response_metadata(
        &self,
        _request: &InferenceRequest,
        _result: &SchedulingResult,
        usage: Option<&Usage>,
        metadata: &mut MetadataEdits,
    ) {
        let Some(usage) = usage else {
            for _ in &self.attributes {
                self.count(Outcome::NoUsage);
            }
            return;
        };
        let vars = BTreeMap::from([(USAGE_VAR, usage_value(usage))]);
        for a in &self.attributes {
            let (outcome, value) = self.value_of(a, &vars);
            if let Some(v) = value {
                metadata.set_number(&a.namespace, &a.name, v as f64);
            }
            self.count(outcome);
        }
    }

    fn on_response_complete(&self, _request: &InferenceRequest, _result: &SchedulingResult, _usage: Option<&Usage>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::result::ProfileResult;
    use crate::test_util::{chat_request, endpoint};
    use serde_json::json;

    fn build_with(parameters: serde_json::Value) -> Result<PluginInstance, BuildError> {
        let spec = PluginSpec { name: "r".into(), type_name: TYPE.into(), parameters, path: "plugins[2]".into() };
        build(&spec, &BuildContext::default())
    }

    fn report(parameters: serde_json::Value, usage: Option<Usage>) -> MetadataEdits {
        let hook = build_with(parameters).unwrap().response.unwrap();
        let request = chat_request("m", &["hi"]);
        let result = SchedulingResult::new(
            "p".into(),
            vec![("p".into(), ProfileResult { targets: vec![endpoint("a").build()] })],
        );
        let mut md = MetadataEdits::default();
        hook.response_metadata(&request, &result, usage.as_ref(), &mut md);
        md
    }

    fn usage(prompt: u64, completion: u64, cached: Option<u64>) -> Option<Usage> {
        Some(Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached })
    }

    fn one(expression: &str, condition: &str) -> serde_json::Value {
        json!({"attributes": [{"key": {"name": "v"}, "expression": expression, "condition": condition}]})
    }

    fn value(md: &MetadataEdits) -> Option<f64> {
        md.namespaces.get(DEFAULT_NAMESPACE).and_then(|m| m.get("v")).copied()
    }

    #[test]
    fn parameter_errors_carry_paths() {
        let err = |p| build_with(p).unwrap_err().path;
        assert_eq!(err(json!({})), "plugins[2].parameters.attributes");
        assert_eq!(err(json!({"attributes": [{"expression": "1"}]})), "plugins[2].parameters.attributes[0].key.name");
        assert_eq!(err(one("", "")), "plugins[2].parameters.attributes[0].expression");
        assert_eq!(err(one("usage.prompt_tokens + -", "")), "plugins[2].parameters.attributes[0].expression");
        assert_eq!(err(one("1", "usage.x >")), "plugins[2].parameters.attributes[0].condition");
        assert_eq!(err(one("request.size", "")), "plugins[2].parameters.attributes[0].expression");
        assert_eq!(err(one("1 + 1.0", "")), "plugins[2].parameters.attributes[0].expression");
        assert_eq!(err(json!({"attributes": [], "extra": 1})), "plugins[2].parameters");
        assert_eq!(
            err(json!({"attributes": [{"key": {"name": "v", "ns": "x"}, "expression": "1"}]})),
            "plugins[2].parameters"
        );
    }

    #[test]
    fn reports_like_gie() {
        // Default namespace, doubles summed, value written as a number.
        let md = report(one("usage.prompt_tokens + usage.completion_tokens", ""), usage(10, 25, None));
        assert_eq!(value(&md), Some(35.0));
        // Custom namespace.
        let p =
            json!({"attributes": [{"key": {"namespace": "custom", "name": "p"}, "expression": "usage.prompt_tokens"}]});
        assert_eq!(report(p, usage(15, 0, None)).namespaces["custom"]["p"], 15.0);
        // has() guards and zero values: 0 is not written.
        let guarded = "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0.0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0.0)";
        assert_eq!(value(&report(one(guarded, ""), usage(0, 25, None))), Some(25.0));
        assert!(report(one(guarded, ""), usage(0, 0, None)).is_empty());
        // Condition false, non-bool condition, non-numeric result, missing field: nothing.
        assert!(report(one("usage.prompt_tokens", "usage.completion_tokens > 0"), usage(10, 0, None)).is_empty());
        assert!(report(one("usage.prompt_tokens", "usage.prompt_tokens"), usage(10, 0, None)).is_empty());
        assert!(report(one("'not a number'", ""), usage(10, 0, None)).is_empty());
        assert!(report(one("usage.non_existent_field", ""), usage(10, 0, None)).is_empty());
        // No usage: nothing, even for a constant expression.
        assert!(report(one("7", ""), None).is_empty());
        // Cached tokens under both spellings; doubles truncate toward zero.
        let cached = "usage.prompt_token_details.cached_tokens + usage.prompt_tokens_details.cached_tokens";
        assert_eq!(value(&report(one(cached, ""), usage(10, 1, Some(3)))), Some(6.0));
        assert!(report(one(cached, ""), usage(10, 1, None)).is_empty(), "absent details are a runtime error");
        assert_eq!(value(&report(one("usage.prompt_tokens / 4.0", ""), usage(10, 0, None))), Some(2.0));
        assert_eq!(value(&report(one("int(usage.total_tokens) - 20", ""), usage(10, 1, None))), Some(-9.0));
    }

    #[test]
    fn outcomes_are_counted() {
        let cx = BuildContext::default();
        let spec = PluginSpec {
            name: "r".into(),
            type_name: TYPE.into(),
            parameters: one("usage.prompt_tokens", "usage.completion_tokens > 0"),
            path: "plugins[0]".into(),
        };
        let hook = build(&spec, &cx).unwrap().response.unwrap();
        let request = chat_request("m", &["hi"]);
        let result = SchedulingResult::new("p".into(), Vec::new());
        for u in [usage(3, 1, None), usage(3, 0, None), None, usage(0, 1, None)] {
            hook.response_metadata(&request, &result, u.as_ref(), &mut MetadataEdits::default());
        }
        let count = |o: Outcome| cx.metrics.attribute_reports.with_label_values(&["r", o.as_str()]).get();
        assert_eq!(
            [Outcome::Reported, Outcome::ConditionFalse, Outcome::NoUsage, Outcome::Zero, Outcome::Error].map(count),
            [1, 1, 1, 1, 0]
        );
    }
}
