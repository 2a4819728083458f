//! Label filters of a manifest's inline config against the pods the manifest creates:
//! every role filter (`decode-filter`, `prefill-filter`, `encode-filter`) and label filter
//! (`label-selector-filter`, its alias `by-label-selector`, `by-label`) is built with its
//! real factory and run over one stand-in endpoint per pod template; a filter that keeps
//! none of them would filter out every real pod too, so it is reported. A template's labels
//! are what the manifest declares: `spec.labels` (decode and worker pods) or
//! `spec.prefill.labels`, the `kueue.x-k8s.io/` labels of `metadata.labels` (the only ones
//! KServe propagates), and `llm-d.ai/role` defaulting to the pool's role. Labels KServe adds
//! on its own are not known here, hence a warning rather than an error.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use serde_yaml::Value;

use super::{Finding, at};
use crate::endpoints::model::{Candidate, Endpoint, MetricsState, ROLE_LABEL};
use crate::framework::build::{BuildContext, PluginSpec};
use crate::framework::context::SchedulingContext;
use crate::framework::data::RequestData;
use crate::plugins::filter::{by_label, label_selector, role};
use crate::plugins::registry::builtin;
use crate::request::InferenceRequest;

const INLINE: &str = "spec.router.scheduler.config.inline";

/// Filter types checked against the pod labels.
const LABEL_FILTERS: &[&str] =
    &[role::DECODE, role::PREFILL, role::ENCODE, label_selector::TYPE, label_selector::OLD_TYPE, by_label::TYPE];

/// A pod template's name and labels.
pub type PodLabels = (&'static str, BTreeMap<String, String>);

/// The label sets of the manifest's pod templates.
pub fn pod_templates(doc: &Value) -> Vec<PodLabels> {
    let propagated: BTreeMap<String, String> = string_map(at(doc, &["metadata", "labels"]))
        .into_iter()
        .filter(|(k, _)| k.starts_with("kueue.x-k8s.io/"))
        .collect();
    let template = |name: &'static str, labels: Option<&Value>, role: &str| {
        let mut all = propagated.clone();
        all.insert(ROLE_LABEL.into(), role.into());
        all.extend(string_map(labels));
        (name, all)
    };
    let mut out = vec![template("decode", at(doc, &["spec", "labels"]), "decode")];
    if let Some(prefill) = at(doc, &["spec", "prefill"]) {
        out.push(template("prefill", prefill.get("labels"), "prefill"));
    }
    out
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    let Some(Value::Mapping(m)) = v else { return BTreeMap::new() };
    m.iter()
        .filter_map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((k.as_str()?.to_string(), value))
        })
        .collect()
}

/// Warns about every label filter of `config` that keeps none of `pods`.
pub fn check(config: &Value, pods: &[PodLabels], out: &mut Vec<Finding>) {
    let registry = builtin();
    let candidates: Vec<Candidate> = pods
        .iter()
        .map(|(name, labels)| {
            let mut endpoint = Endpoint::new(*name, IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);
            endpoint.labels = labels.clone();
            Candidate {
                endpoint: Arc::new(endpoint),
                metrics: Arc::new(MetricsState::default()),
                models: None,
                metrics_known: false,
            }
        })
        .collect();
    let (request, data) = (InferenceRequest::default(), RequestData::default());
    let cx = SchedulingContext { request: &request, data: &data, now: tokio::time::Instant::now() };
    let declared = config.get("plugins").and_then(Value::as_sequence).into_iter().flatten().enumerate();
    for (i, plugin) in declared {
        let Some(type_name) = plugin.get("type").and_then(Value::as_str).filter(|t| LABEL_FILTERS.contains(t)) else {
            continue;
        };
        let name = plugin.get("name").and_then(Value::as_str).unwrap_or(type_name);
        let parameters = plugin.get("parameters").and_then(|p| serde_json::to_value(p).ok()).unwrap_or_default();
        let path = format!("{INLINE}.plugins[{i}]");
        let spec = PluginSpec { name: name.into(), type_name: type_name.into(), parameters, path: path.clone() };
        // A filter that does not build already has its loader error.
        let Some(filter) = registry
            .get(type_name)
            .and_then(|r| (r.factory)(&spec, &BuildContext::default()).ok())
            .and_then(|i| i.filter)
        else {
            continue;
        };
        if filter.filter(&cx, candidates.clone()).is_empty() {
            let described: Vec<String> = pods.iter().map(|(n, l)| format!("{n} {l:?}")).collect();
            out.push(Finding::warning(
                path,
                format!("{name} ({type_name}) matches no pod template of this manifest: {}", described.join("; ")),
                "fix the filter's labels or add them to the pool (spec.labels / spec.prefill.labels), or add the missing pool",
            ));
        }
    }
}
