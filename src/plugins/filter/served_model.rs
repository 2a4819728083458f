//! `served-model-filter` (llm-d, alpha): keeps the endpoints whose `/v1/models` list (from
//! `models-data-source` + `models-data-extractor`) contains the request's target model.
//!
//! Parameters: `onMissing` (`Pass` | `Fail`, default `Pass`), `fallbackOnEmpty` (false).
//! - Endpoints listing the target are kept. Endpoints without a list yet are kept too
//!   (`Pass`) unless the target is a LoRA adapter that a listed endpoint serves (an endpoint
//!   that has not reported is unlikely to have that adapter registered).
//! - No endpoint lists the target: the endpoints without a list (`Pass`), else the whole set
//!   with `fallbackOnEmpty`, else none (the request fails with 503).
//! - A request without a target model passes unfiltered.
//!
//! Metrics: `llm_d_epp_served_model_filter_decisions_total{plugin_name, outcome}` (`listed`,
//! `unlisted`, `fallback`, `empty`, `not_applicable`),
//! `llm_d_epp_served_model_filter_candidates_total{plugin_name}` and
//! `llm_d_epp_served_model_filter_unlisted_candidates_total{plugin_name}`.

use std::sync::Arc;

use prometheus::IntCounter;
use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance};

/// Type name.
pub const TYPE: &str = "served-model-filter";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `Pass` (default) or `Fail`: what to do with endpoints that have no list yet.
    pub on_missing: String,
    /// Return the unfiltered set instead of nothing.
    pub fallback_on_empty: bool,
}

/// One outcome per call (the metric's `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Some endpoint lists the target.
    Listed,
    /// None lists it; the endpoints without a list were kept.
    Unlisted,
    /// Nothing kept; `fallbackOnEmpty` returned everything.
    Fallback,
    /// Nothing kept.
    Empty,
    /// The request has no target model.
    NotApplicable,
}

impl Outcome {
    const ALL: [Outcome; 5] =
        [Outcome::Listed, Outcome::Unlisted, Outcome::Fallback, Outcome::Empty, Outcome::NotApplicable];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Listed => "listed",
            Outcome::Unlisted => "unlisted",
            Outcome::Fallback => "fallback",
            Outcome::Empty => "empty",
            Outcome::NotApplicable => "not_applicable",
        }
    }
}

/// The filter.
#[derive(Debug)]
pub struct ServedModelFilter {
    pass_on_missing: bool,
    fallback_on_empty: bool,
    decisions: Vec<(Outcome, IntCounter)>,
    candidates: IntCounter,
    unlisted: IntCounter,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let pass_on_missing = match p.on_missing.as_str() {
        "" | "Pass" => true,
        "Fail" => false,
        other => {
            return Err(BuildError::new(
                format!("{}.parameters.onMissing", spec.path),
                format!("must be \"Pass\" or \"Fail\", got {other:?}"),
            ));
        }
    };
    let m = &cx.metrics;
    let name = &*spec.name;
    let filter = ServedModelFilter {
        pass_on_missing,
        fallback_on_empty: p.fallback_on_empty,
        decisions: Outcome::ALL
            .iter()
            .map(|o| (*o, m.served_model_decisions.with_label_values(&[name, o.as_str()])))
            .collect(),
        candidates: m.served_model_candidates.with_label_values(&[name]),
        unlisted: m.served_model_unlisted.with_label_values(&[name]),
    };
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(Arc::new(filter)))
}

impl ServedModelFilter {
    fn record(&self, outcome: Outcome) {
        if let Some((_, c)) = self.decisions.iter().find(|(o, _)| *o == outcome) {
            c.inc();
        }
    }
}

impl Filter for ServedModelFilter {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let target = cx.request.target_model.as_str();
        if target.is_empty() {
            self.record(Outcome::NotApplicable);
            return candidates;
        }
        let (mut serving, mut unlisted) = (Vec::new(), Vec::new());
        let mut adapter = false;
        for (i, c) in candidates.iter().enumerate() {
            match &c.models {
                None => unlisted.push(i),
                Some(models) => {
                    if let Some(m) = models.find(target) {
                        serving.push(i);
                        adapter |= m.parent.is_some();
                    }
                }
            }
        }
        self.candidates.inc_by(candidates.len() as u64);
        self.unlisted.inc_by(unlisted.len() as u64);
        let keep: Vec<usize> = if !serving.is_empty() {
            self.record(Outcome::Listed);
            if self.pass_on_missing && !adapter {
                serving.extend(unlisted);
            }
            serving
        } else if self.pass_on_missing && !unlisted.is_empty() {
            self.record(Outcome::Unlisted);
            unlisted
        } else if self.fallback_on_empty {
            self.record(Outcome::Fallback);
            return candidates;
        } else {
            self.record(Outcome::Empty);
            return Vec::new();
        };
        let mut keep_mask = vec![false; candidates.len()];
        for i in keep {
            keep_mask[i] = true;
        }
        candidates.into_iter().zip(keep_mask).filter_map(|(c, k)| k.then_some(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chat_request, context_for, endpoint};
    use serde_json::json;

    fn filter_with(parameters: serde_json::Value, cx: &BuildContext) -> Arc<dyn Filter> {
        let spec = PluginSpec { name: "smf".into(), type_name: TYPE.into(), parameters, path: "plugins[0]".into() };
        build(&spec, cx).unwrap().filter.unwrap()
    }

    fn run(f: &dyn Filter, model: &str, candidates: Vec<Candidate>) -> Vec<String> {
        let mut request = chat_request(model, &["hi"]);
        request.target_model = model.to_string();
        let data = Default::default();
        let cx = context_for(&request, &data);
        f.filter(&cx, candidates).iter().map(|c| c.id().to_string()).collect()
    }

    fn pool() -> Vec<Candidate> {
        vec![
            endpoint("base-only").serves(&["llama"]).build(),
            endpoint("with-adapter").serves(&["llama", "sql-v3"]).build(),
            endpoint("no-list").build(),
            endpoint("other").serves(&["mistral"]).build(),
        ]
    }

    #[test]
    fn keeps_endpoints_that_list_the_model() {
        let cx = BuildContext::default();
        let pass = filter_with(serde_json::Value::Null, &cx);
        // Base model: listing endpoints plus those without a list (in input order).
        assert_eq!(run(&*pass, "llama", pool()), ["base-only", "with-adapter", "no-list"]);
        // Adapter listed somewhere: only the endpoints listing it.
        assert_eq!(run(&*pass, "sql-v3", pool()), ["with-adapter"]);
        // Listed nowhere: the endpoints without a list.
        assert_eq!(run(&*pass, "gemma", pool()), ["no-list"]);
        // No target model: unfiltered.
        assert_eq!(run(&*pass, "", pool()).len(), 4);
        let fail = filter_with(json!({"onMissing": "Fail"}), &cx);
        assert_eq!(run(&*fail, "llama", pool()), ["base-only", "with-adapter"]);
        assert!(run(&*fail, "gemma", pool()).is_empty());
        let fallback = filter_with(json!({"onMissing": "Fail", "fallbackOnEmpty": true}), &cx);
        assert_eq!(run(&*fallback, "gemma", pool()).len(), 4);
        let count = |o: Outcome| cx.metrics.served_model_decisions.with_label_values(&["smf", o.as_str()]).get();
        assert_eq!(Outcome::ALL.map(count), [3, 1, 1, 1, 1]);
        assert_eq!(
            cx.metrics.served_model_candidates.with_label_values(&["smf"]).get(),
            24,
            "calls without a target model count none"
        );
        assert_eq!(cx.metrics.served_model_unlisted.with_label_values(&["smf"]).get(), 6);
    }

    #[test]
    fn parameters_are_strict_and_the_contract_holds() {
        let cx = BuildContext::default();
        let spec =
            |p| PluginSpec { name: "f".into(), type_name: TYPE.into(), parameters: p, path: "plugins[3]".into() };
        assert_eq!(
            build(&spec(json!({"onMissing": "Maybe"})), &cx).unwrap_err().path,
            "plugins[3].parameters.onMissing"
        );
        assert!(build(&spec(json!({"onMissing": 3})), &cx).is_err());
        assert!(build(&spec(json!({"extra": true})), &cx).is_err());
        crate::plugins::filter::contract::check(&*filter_with(json!({}), &cx));
    }
}
