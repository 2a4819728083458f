//! Objectives and model rewrites as the request path reads them: objective name -> priority
//! (InferenceObjective objects, else the `--objective` flag) and model -> rewrite target
//! (InferenceModelRewrite objects). The Kubernetes watches (`k8s::objectives`) write here;
//! the scheduler and the ext_proc stream only read, so the request path does not depend on
//! Kubernetes. Reads are lock-free snapshots (`ArcSwap`); writes rebuild the snapshot.
//!
//! Precedence: an InferenceObjective object wins over an `--objective` flag entry of the same
//! name; a name no object carries falls back to the flag (the Go EPPs have no flag: a name
//! without an object gets priority 0, which is what epp does when neither knows it).

pub mod rewrite;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use prometheus::Registry;

use crate::telemetry::labels::BoundedLabels;
use crate::telemetry::twin::TwinCounterVec;
use rewrite::{RewriteSet, RuleIndex};

/// Distinct incoming model names kept as label values of generic-rule decisions before
/// folding to `other` (exact-rule models are configured names and always kept).
const GENERIC_MODEL_LABEL_CAP: usize = 1000;

/// A rewrite decision for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The InferenceModelRewrite that decided.
    pub rewrite_name: Arc<str>,
    /// The model to send upstream.
    pub target: String,
}

#[derive(Default)]
struct Snapshot {
    objectives: HashMap<String, i32>,
    rewrites: RuleIndex,
}

#[derive(Default)]
struct Written {
    objectives: HashMap<String, i32>,
    rewrites: HashMap<String, RewriteSet>,
}

struct Inner {
    fallback: HashMap<String, i32>,
    snapshot: ArcSwap<Snapshot>,
    written: Mutex<Written>,
    decisions: Option<TwinCounterVec>,
    generic_models: BoundedLabels,
}

/// Shared handle (cheap to clone).
#[derive(Clone)]
pub struct ObjectiveStore {
    inner: Arc<Inner>,
}

impl Default for ObjectiveStore {
    fn default() -> Self {
        Self::new(HashMap::new())
    }
}

impl std::fmt::Debug for ObjectiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.snapshot.load();
        f.debug_struct("ObjectiveStore")
            .field("fallback", &self.inner.fallback.len())
            .field("objectives", &s.objectives.len())
            .field("rewrites", &s.rewrites.len())
            .finish()
    }
}

impl ObjectiveStore {
    /// A store whose objective lookups fall back to `fallback` (`--objective`); no metrics.
    pub fn new(fallback: HashMap<String, i32>) -> Self {
        Self::build(fallback, None)
    }

    /// Like [`new`](Self::new), counting rewrite decisions on `registry`
    /// (`inference_extension_model_rewrite_decisions_total` and its llm-d twin).
    pub fn with_metrics(fallback: HashMap<String, i32>, registry: &Registry) -> Result<Self, prometheus::Error> {
        let decisions = TwinCounterVec::register(
            registry,
            "inference_extension_model_rewrite_decisions_total",
            "llm_d_epp_model_rewrite_decisions_total",
            "Model rewrite decisions, by InferenceModelRewrite, incoming model and chosen target.",
            &["model_rewrite_name", "model_name", "target_model"],
        )?;
        Ok(Self::build(fallback, Some(decisions)))
    }

    fn build(fallback: HashMap<String, i32>, decisions: Option<TwinCounterVec>) -> Self {
        Self {
            inner: Arc::new(Inner {
                fallback,
                snapshot: ArcSwap::from_pointee(Snapshot::default()),
                written: Mutex::new(Written::default()),
                decisions,
                generic_models: BoundedLabels::new(GENERIC_MODEL_LABEL_CAP),
            }),
        }
    }

    /// The priority of `objective`: its InferenceObjective's, else the `--objective` entry.
    pub fn priority(&self, objective: &str) -> Option<i32> {
        self.inner.snapshot.load().objectives.get(objective).or_else(|| self.inner.fallback.get(objective)).copied()
    }

    /// The rewrite for a request naming `model`, if a rule applies and has a target (random
    /// weighted choice).
    pub fn rewrite(&self, model: &str) -> Option<Rewrite> {
        self.rewrite_with(model, &mut rand::rng())
    }

    /// [`rewrite`](Self::rewrite) with a caller's random source (tests seed it).
    pub fn rewrite_with(&self, model: &str, rng: &mut impl rand::Rng) -> Option<Rewrite> {
        let snapshot = self.inner.snapshot.load();
        let applicable = snapshot.rewrites.rule_for(model)?;
        let target = rewrite::pick(&applicable.rule.targets, rng)?;
        if let Some(decisions) = &self.inner.decisions {
            // Exact rules name their models in the object; generic ones see any client input.
            let model_label = if applicable.rule.models.is_empty() {
                self.inner.generic_models.get(model)
            } else {
                model.to_string()
            };
            decisions.with(&[applicable.name, &model_label, &target.model]).inc();
        }
        Some(Rewrite { rewrite_name: applicable.name.clone(), target: target.model.clone() })
    }

    /// InferenceObjective objects (name -> priority) held now.
    pub fn objective_count(&self) -> usize {
        self.inner.snapshot.load().objectives.len()
    }

    /// InferenceModelRewrite objects held now.
    pub fn rewrite_count(&self) -> usize {
        self.inner.snapshot.load().rewrites.len()
    }

    /// Replaces every objective (a LIST).
    pub fn replace_objectives(&self, objectives: HashMap<String, i32>) {
        self.write(|w| w.objectives = objectives);
    }

    /// Adds or updates one objective.
    pub fn set_objective(&self, name: &str, priority: i32) {
        self.write(|w| {
            w.objectives.insert(name.to_string(), priority);
        });
    }

    /// Removes one objective (no-op when absent).
    pub fn remove_objective(&self, name: &str) {
        self.write(|w| {
            w.objectives.remove(name);
        });
    }

    /// Replaces every rewrite object (a LIST).
    pub fn replace_rewrites(&self, sets: Vec<RewriteSet>) {
        self.write(|w| w.rewrites = sets.into_iter().map(|s| (s.name.to_string(), s)).collect());
    }

    /// Adds or updates one rewrite object.
    pub fn set_rewrite(&self, set: RewriteSet) {
        self.write(|w| {
            w.rewrites.insert(set.name.to_string(), set);
        });
    }

    /// Removes one rewrite object (no-op when absent).
    pub fn remove_rewrite(&self, name: &str) {
        self.write(|w| {
            w.rewrites.remove(name);
        });
    }

    fn write(&self, change: impl FnOnce(&mut Written)) {
        let mut written = self.inner.written.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut written);
        let snapshot = Snapshot {
            objectives: written.objectives.clone(),
            rewrites: RuleIndex::build(written.rewrites.values().cloned().collect()),
        };
        self.inner.snapshot.store(Arc::new(snapshot));
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::rewrite::{Rule, Target};
    use super::*;

    #[test]
    fn objects_win_over_the_flag_and_the_flag_fills_the_rest() {
        let store = ObjectiveStore::new(HashMap::from([("batch".into(), -1), ("chat".into(), 5)]));
        assert_eq!(store.priority("batch"), Some(-1));
        store.set_objective("batch", 3);
        assert_eq!((store.priority("batch"), store.priority("chat"), store.priority("x")), (Some(3), Some(5), None));
        store.remove_objective("batch");
        assert_eq!(store.priority("batch"), Some(-1));
        store.replace_objectives(HashMap::from([("x".into(), 0)]));
        assert_eq!((store.priority("x"), store.objective_count()), (Some(0), 1));
    }

    #[test]
    fn rewrites_are_counted_and_follow_set_and_remove() {
        let registry = Registry::new();
        let store = ObjectiveStore::with_metrics(HashMap::new(), &registry).unwrap();
        let rule = Rule { models: vec!["alias".into()], targets: vec![Target { model: "real".into(), weight: None }] };
        store.set_rewrite(RewriteSet { name: "r1".into(), created: "2026-01-01T00:00:00Z".into(), rules: vec![rule] });
        let mut rng = StdRng::seed_from_u64(3);
        let got = store.rewrite_with("alias", &mut rng).unwrap();
        assert_eq!((&*got.rewrite_name, got.target.as_str()), ("r1", "real"));
        assert!(store.rewrite_with("other", &mut rng).is_none());
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(
            text.contains(
                r#"inference_extension_model_rewrite_decisions_total{model_name="alias",model_rewrite_name="r1",target_model="real"} 1"#
            ),
            "{text}"
        );
        store.remove_rewrite("r1");
        assert!(store.rewrite_with("alias", &mut rng).is_none());
        assert_eq!(store.rewrite_count(), 0);
    }
}
