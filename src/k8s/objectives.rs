//! InferenceObjective and InferenceModelRewrite watches: finds the served group version by
//! API discovery (llm-d's `llm-d.ai/v1alpha2` preferred, GIE's
//! `inference.networking.x-k8s.io/v1alpha2` otherwise, as llm-d's EPP; retried with backoff
//! while neither is installed), follows the kind in the pool namespace with kube's watcher,
//! keeps the objects whose `spec.poolRef` names this EPP's pool (name and group; an object
//! whose reference moves away or that is being deleted is dropped, as the Go reconcilers do)
//! and writes them to the [`ObjectiveStore`] the request path reads. Objects that do not
//! decode are counted (`epp_k8s_watch_failures_total{reason="decode"}`) and skipped;
//! `epp_k8s_objects{resource}` is the number held.

use std::collections::HashMap;

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::KubeHandle;
use super::pool::GROUP_V1;
use super::watch::{self, WatchEvent, WatchTarget};
use crate::objectives::ObjectiveStore;
use crate::objectives::rewrite::{RewriteSet, Rule, Target};

/// Group versions serving the kinds, most preferred first.
pub const GROUP_VERSIONS: [(&str, &str); 2] = [("llm-d.ai", "v1alpha2"), ("inference.networking.x-k8s.io", "v1alpha2")];

/// Which of the two kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// `InferenceObjective` (priority by objective name).
    Objective,
    /// `InferenceModelRewrite` (model rewrite rules).
    ModelRewrite,
}

impl ObjectKind {
    /// The Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Objective => "InferenceObjective",
            Self::ModelRewrite => "InferenceModelRewrite",
        }
    }

    /// The resource (plural) name, also the metric label.
    pub fn resource(self) -> &'static str {
        match self {
            Self::Objective => "inferenceobjectives",
            Self::ModelRewrite => "inferencemodelrewrites",
        }
    }
}

/// The pool objects must reference to be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolIdentity {
    /// Pool name.
    pub name: String,
    /// Pool API group (`--pool-group`).
    pub group: String,
}

impl PoolIdentity {
    /// True when `object`'s `spec.poolRef` names this pool (a missing group means the CRD's
    /// default, `inference.networking.k8s.io`) and the object is not being deleted.
    pub fn referenced_by(&self, object: &Value) -> bool {
        let Some(pool_ref) = object.pointer("/spec/poolRef") else { return false };
        let group = pool_ref.get("group").and_then(Value::as_str).unwrap_or(GROUP_V1);
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null());
        !deleting && pool_ref.get("name").and_then(Value::as_str) == Some(&self.name) && group == self.group
    }
}

/// Follows both kinds until `cancel` fires.
pub async fn run(kube: KubeHandle, pool: PoolIdentity, store: ObjectiveStore, cancel: CancellationToken) {
    let objectives = follow(kube.clone(), pool.clone(), store.clone(), ObjectKind::Objective, cancel.clone());
    let rewrites = follow(kube, pool, store, ObjectKind::ModelRewrite, cancel);
    tokio::join!(objectives, rewrites);
}

/// Follows one kind until `cancel` fires.
pub async fn follow(
    kube: KubeHandle,
    pool: PoolIdentity,
    store: ObjectiveStore,
    kind: ObjectKind,
    cancel: CancellationToken,
) {
    let Some(api) = resolve(&kube, kind, &cancel).await else { return };
    info!(kind = kind.kind(), group = %api.group, version = %api.version, namespace = %kube.namespace,
        pool = %pool.name, "Watching for the pool's objects");
    let target = WatchTarget {
        api,
        namespace: Some(kube.namespace.clone()),
        label_selector: None,
        field_selector: None,
        resource: kind.resource().into(),
    };
    let (tx, mut events) = mpsc::channel(64);
    let child = cancel.child_token();
    tokio::spawn(watch::run(kube.client.clone(), target, kube.options, kube.metrics.clone(), tx, child.clone()));
    let apply = Applier { kube: &kube, pool: &pool, store: &store, kind };
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => break,
            e = events.recv() => match e { Some(e) => e, None => break },
        };
        apply.event(event);
    }
    child.cancel();
}

struct Applier<'a> {
    kube: &'a KubeHandle,
    pool: &'a PoolIdentity,
    store: &'a ObjectiveStore,
    kind: ObjectKind,
}

impl Applier<'_> {
    fn event(&self, event: WatchEvent) {
        match (self.kind, event) {
            (ObjectKind::Objective, WatchEvent::Listed(items)) => {
                let held: HashMap<String, i32> = items.iter().filter_map(|o| self.objective(o)).collect();
                self.store.replace_objectives(held);
            }
            (ObjectKind::Objective, WatchEvent::Applied(o)) => match self.objective(&o) {
                Some((name, priority)) => self.store.set_objective(&name, priority),
                None => self.store.remove_objective(name_of(&o)),
            },
            (ObjectKind::Objective, WatchEvent::Deleted(o)) => self.store.remove_objective(name_of(&o)),
            (ObjectKind::ModelRewrite, WatchEvent::Listed(items)) => {
                self.store.replace_rewrites(items.iter().filter_map(|o| self.rewrite(o)).collect());
            }
            (ObjectKind::ModelRewrite, WatchEvent::Applied(o)) => match self.rewrite(&o) {
                Some(set) => self.store.set_rewrite(set),
                None => self.store.remove_rewrite(name_of(&o)),
            },
            (ObjectKind::ModelRewrite, WatchEvent::Deleted(o)) => self.store.remove_rewrite(name_of(&o)),
        }
        let held = match self.kind {
            ObjectKind::Objective => self.store.objective_count(),
            ObjectKind::ModelRewrite => self.store.rewrite_count(),
        };
        self.kube.metrics.objects.with_label_values(&[self.kind.resource()]).set(held as i64);
    }

    /// The object's (name, priority) when it references the pool and decodes.
    fn objective(&self, object: &Value) -> Option<(String, i32)> {
        if !self.pool.referenced_by(object) {
            return None;
        }
        self.decoded(object, parse_objective(object))
    }

    /// The object's rules when it references the pool and decodes.
    fn rewrite(&self, object: &Value) -> Option<RewriteSet> {
        if !self.pool.referenced_by(object) {
            return None;
        }
        self.decoded(object, parse_rewrite(object))
    }

    fn decoded<T>(&self, object: &Value, parsed: Result<T, String>) -> Option<T> {
        parsed
            .inspect_err(|error| {
                self.kube.metrics.failures.with_label_values(&[self.kind.resource(), "decode"]).inc();
                warn!(kind = self.kind.kind(), name = name_of(object), %error, "Object ignored");
            })
            .ok()
    }
}

fn name_of(object: &Value) -> &str {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

/// An InferenceObjective's name and priority (`spec.priority`, absent = 0).
pub fn parse_objective(object: &Value) -> Result<(String, i32), String> {
    let name = name_of(object);
    if name.is_empty() {
        return Err("no metadata.name".into());
    }
    let priority = match object.pointer("/spec/priority") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| format!("spec.priority {v} is not an int32"))?,
    };
    Ok((name.to_string(), priority))
}

/// An InferenceModelRewrite's rules.
pub fn parse_rewrite(object: &Value) -> Result<RewriteSet, String> {
    let name = name_of(object);
    if name.is_empty() {
        return Err("no metadata.name".into());
    }
    let created = object.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or_default();
    let rules = match object.pointer("/spec/rules") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(rules)) => rules
            .iter()
            .enumerate()
            .map(|(i, r)| parse_rule(r).map_err(|e| format!("spec.rules[{i}]: {e}")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("spec.rules is not a list".into()),
    };
    Ok(RewriteSet { name: name.into(), created: created.to_string(), rules })
}

fn parse_rule(rule: &Value) -> Result<Rule, String> {
    let list = |key: &str| match rule.get(key) {
        None | Some(Value::Null) => Ok(&[][..]),
        Some(Value::Array(items)) => Ok(items.as_slice()),
        Some(_) => Err(format!("{key} is not a list")),
    };
    let mut models = Vec::new();
    for (i, m) in list("matches")?.iter().enumerate() {
        let Some(model) = m.get("model").filter(|v| !v.is_null()) else { continue };
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("Exact");
        if kind != "Exact" {
            return Err(format!("matches[{i}].model.type {kind:?} is not supported (only Exact)"));
        }
        let value =
            model.get("value").and_then(Value::as_str).ok_or_else(|| format!("matches[{i}].model.value missing"))?;
        models.push(value.to_string());
    }
    let mut targets = Vec::new();
    for (i, t) in list("targets")?.iter().enumerate() {
        let model = t
            .get("modelRewrite")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| format!("targets[{i}].modelRewrite missing"))?;
        let weight = match t.get("weight") {
            None | Some(Value::Null) => None,
            Some(w) => Some(
                w.as_u64()
                    .and_then(|w| u32::try_from(w).ok())
                    .filter(|w| (1..=1_000_000).contains(w))
                    .ok_or_else(|| format!("targets[{i}].weight {w} is not in 1..=1000000"))?,
            ),
        };
        targets.push(Target { model: model.to_string(), weight });
    }
    Ok(Rule { models, targets })
}

/// Finds the group version serving `kind`, retrying with backoff until one does or `cancel`
/// fires.
async fn resolve(kube: &KubeHandle, kind: ObjectKind, cancel: &CancellationToken) -> Option<ApiResource> {
    let mut delay = kube.options.initial_backoff;
    let mut warned = false;
    loop {
        for (group, version) in GROUP_VERSIONS {
            let wanted = GroupVersionKind::gvk(group, version, kind.kind());
            let found = tokio::select! {
                _ = cancel.cancelled() => return None,
                r = kube::discovery::pinned_kind(&kube.client, &wanted) => r,
            };
            if let Ok((api, _)) = found {
                return Some(api);
            }
        }
        if !warned {
            info!(
                kind = kind.kind(),
                "CRD not installed (llm-d.ai or inference.networking.x-k8s.io); checking again with backoff"
            );
            warned = true;
        }
        kube.metrics.failures.with_label_values(&[kind.resource(), "discovery"]).inc();
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(kube.options.max_backoff);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool() -> PoolIdentity {
        PoolIdentity { name: "p".into(), group: GROUP_V1.into() }
    }

    #[test]
    fn pool_reference_needs_name_and_group_and_no_deletion() {
        let obj = |r: Value| json!({"metadata": {"name": "o"}, "spec": {"poolRef": r}});
        assert!(pool().referenced_by(&obj(json!({"name": "p"}))));
        assert!(pool().referenced_by(&obj(json!({"name": "p", "group": GROUP_V1}))));
        assert!(!pool().referenced_by(&obj(json!({"name": "q"}))));
        assert!(!pool().referenced_by(&obj(json!({"name": "p", "group": "inference.networking.x-k8s.io"}))));
        assert!(!pool().referenced_by(&json!({"metadata": {"name": "o"}, "spec": {}})));
        let mut deleting = obj(json!({"name": "p"}));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(!pool().referenced_by(&deleting));
    }

    #[test]
    fn objectives_and_rewrites_decode_or_explain_why_not() {
        let o = |spec: Value| json!({"metadata": {"name": "o"}, "spec": spec});
        assert_eq!(parse_objective(&o(json!({"priority": -3}))), Ok(("o".into(), -3)));
        assert_eq!(parse_objective(&o(json!({}))), Ok(("o".into(), 0)));
        assert!(parse_objective(&o(json!({"priority": 1u64 << 40}))).unwrap_err().contains("int32"));
        assert!(parse_objective(&o(json!({"priority": "high"}))).is_err());

        let r = json!({"metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"rules": [
            {"matches": [{"model": {"type": "Exact", "value": "a"}}, {"model": {"value": "b"}}],
             "targets": [{"modelRewrite": "a-v1", "weight": 3}, {"modelRewrite": "a-v2"}]},
            {"targets": [{"modelRewrite": "default"}]}]}});
        let set = parse_rewrite(&r).unwrap();
        assert_eq!(set.rules[0].models, ["a", "b"]);
        assert_eq!(set.rules[0].targets[0], Target { model: "a-v1".into(), weight: Some(3) });
        assert_eq!(set.rules[0].targets[1].weight, None);
        assert!(set.rules[1].models.is_empty());
        let bad = |rules: Value| parse_rewrite(&json!({"metadata": {"name": "r"}, "spec": {"rules": rules}}));
        assert!(bad(json!([{"targets": [{"modelRewrite": "x", "weight": 0}]}])).unwrap_err().contains("weight"));
        assert!(bad(json!([{"targets": [{"weight": 1}]}])).unwrap_err().contains("modelRewrite"));
        assert!(
            bad(json!([{"matches": [{"model": {"type": "Prefix", "value": "a"}}]}])).unwrap_err().contains("Prefix")
        );
        assert!(bad(json!({"not": "a list"})).is_err());
    }
}
