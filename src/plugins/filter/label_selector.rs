//! `label-selector-filter` (deprecated alias `by-label-selector`): keeps endpoints whose pod
//! labels match a Kubernetes label selector. `matchLabels` (map; all must equal) and
//! `matchExpressions` (`key`, `operator` In / NotIn / Exists / DoesNotExist, `values`) are
//! ANDed; an empty selector keeps everything. In/NotIn need values; Exists/DoesNotExist take
//! none. NotIn and DoesNotExist match endpoints without the label.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance};

/// Type name.
pub const TYPE: &str = "label-selector-filter";
/// Deprecated alias (llm-d v0.9.0, removal v0.11.0).
pub const OLD_TYPE: &str = "by-label-selector";

/// A selector operator.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum Operator {
    /// Value in `values`.
    In,
    /// Label absent or value not in `values`.
    NotIn,
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: Operator,
    /// Values for In / NotIn.
    #[serde(default)]
    pub values: Vec<String>,
}

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Exact label matches.
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    pub match_expressions: Vec<Requirement>,
}

/// The filter.
#[derive(Debug)]
pub struct LabelSelectorFilter {
    params: Params,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: Params = decode_params(spec)?;
    for (i, r) in params.match_expressions.iter().enumerate() {
        let path = format!("{}.parameters.matchExpressions[{i}]", spec.path);
        let needs_values = matches!(r.operator, Operator::In | Operator::NotIn);
        if r.key.is_empty() {
            return Err(BuildError::new(format!("{path}.key"), "must not be empty"));
        }
        if needs_values == r.values.is_empty() {
            let msg = if needs_values {
                "In and NotIn need at least one value"
            } else {
                "Exists and DoesNotExist take no values"
            };
            return Err(BuildError::new(format!("{path}.values"), msg));
        }
    }
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(Arc::new(LabelSelectorFilter { params })))
}

impl LabelSelectorFilter {
    fn matches(&self, c: &Candidate) -> bool {
        let labels = &c.endpoint.labels;
        self.params.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.params.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    Operator::In => value.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }
}

impl Filter for LabelSelectorFilter {
    fn filter(&self, _: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        candidates.into_iter().filter(|c| self.matches(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    fn filter(params: serde_json::Value) -> Result<LabelSelectorFilter, BuildError> {
        let spec =
            PluginSpec { name: "f".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() };
        // The factory must accept the parameters; the test then drives the typed filter.
        build(&spec, &BuildContext::default())?;
        Ok(LabelSelectorFilter { params: serde_json::from_value(spec.parameters).unwrap_or_default() })
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let f = filter(serde_json::json!({"matchLabels": {"llm-d.ai/role": "decode"}, "matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["h100", "h200"]}, {"key": "drain", "operator": "DoesNotExist"}]})).unwrap();
        let (request, data) = (Default::default(), Default::default());
        let c = vec![
            endpoint("ok").role("decode").label("gpu", "h100").build(),
            endpoint("draining").role("decode").label("gpu", "h100").label("drain", "1").build(),
            endpoint("a100").role("decode").label("gpu", "a100").build(),
            endpoint("prefill").role("prefill").label("gpu", "h200").build(),
        ];
        let kept: Vec<String> = f.filter(&context_for(&request, &data), c).iter().map(|c| c.id().to_string()).collect();
        assert_eq!(kept, ["ok"]);
        super::super::contract::check(&f);
    }

    #[test]
    fn malformed_requirements_are_errors() {
        let e = filter(serde_json::json!({"matchExpressions": [{"key": "k", "operator": "In"}]})).unwrap_err();
        assert_eq!(e.path, "plugins[0].parameters.matchExpressions[0].values");
        assert!(
            filter(serde_json::json!({"matchExpressions": [{"key": "k", "operator": "Matches", "values": ["x"]}]}))
                .is_err()
        );
        assert!(filter(serde_json::json!({"selector": {}})).is_err());
    }
}
