//! `by-label` (deprecated llm-d v0.9.0, removal v0.11.0; replacement `label-selector-filter`):
//! keeps endpoints whose label `label` equals one of `validValues`, plus unlabelled endpoints
//! when `allowsNoLabel`. Parameters: `label` (required), `validValues` ([]), `allowsNoLabel`
//! (false).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance};

/// Type name.
pub const TYPE: &str = "by-label";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Label key.
    pub label: String,
    /// Accepted values.
    pub valid_values: Vec<String>,
    /// Keep endpoints without the label.
    pub allows_no_label: bool,
}

/// The filter.
#[derive(Debug)]
pub struct ByLabelFilter {
    params: Params,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: Params = decode_params(spec)?;
    if params.label.is_empty() {
        return Err(BuildError::new(format!("{}.parameters.label", spec.path), "is required"));
    }
    tracing::warn!(plugin = %spec.name, "by-label is deprecated; use label-selector-filter");
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(Arc::new(ByLabelFilter { params })))
}

impl Filter for ByLabelFilter {
    fn filter(&self, _: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let p = &self.params;
        candidates
            .into_iter()
            .filter(|c| match c.endpoint.label(&p.label) {
                Some(v) => p.valid_values.iter().any(|ok| ok == v),
                None => p.allows_no_label,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn exact_values_and_unlabelled() {
        let (request, data) = (Default::default(), Default::default());
        let cx = context_for(&request, &data);
        let c =
            || vec![endpoint("p").role("prefill").build(), endpoint("d").role("decode").build(), endpoint("u").build()];
        let mut f = ByLabelFilter {
            params: Params {
                label: "llm-d.ai/role".into(),
                valid_values: vec!["decode".into()],
                allows_no_label: false,
            },
        };
        let ids = |v: Vec<Candidate>| v.iter().map(|c| c.id().to_string()).collect::<Vec<_>>();
        assert_eq!(ids(f.filter(&cx, c())), ["d"]);
        f.params.allows_no_label = true;
        assert_eq!(ids(f.filter(&cx, c())), ["d", "u"]);
        super::super::contract::check(&f);
        let spec = PluginSpec {
            name: "b".into(),
            type_name: TYPE.into(),
            parameters: serde_json::json!({"validValues": ["x"]}),
            path: "plugins[0]".into(),
        };
        assert_eq!(build(&spec, &BuildContext::default()).unwrap_err().path, "plugins[0].parameters.label");
    }
}
