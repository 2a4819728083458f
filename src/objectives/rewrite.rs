//! Model rewrite rules (what InferenceModelRewrite objects say) and the two decisions the
//! Go EPPs make with them: which rule applies to a model (exact-model rules beat generic
//! ones; among equals the oldest object wins) and which target a rule picks (weighted
//! random; unweighted targets are never picked when any target has a weight; all unweighted
//! = uniform).

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;

/// One weighted destination of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The model name written into the request (`modelRewrite`).
    pub model: String,
    /// `weight` (1..=1_000_000 by the CRD's validation); `None` when unset.
    pub weight: Option<u32>,
}

/// One rule: the models it matches and where they go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Exact model names matched; empty = a generic rule (matches every model).
    pub models: Vec<String>,
    /// Destinations; a rule without targets leaves the model unchanged.
    pub targets: Vec<Target>,
}

/// One InferenceModelRewrite object, reduced to what routing needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriteSet {
    /// `metadata.name` (the `model_rewrite_name` metric label).
    pub name: Arc<str>,
    /// `metadata.creationTimestamp` (RFC 3339, UTC, as the API server writes it: its
    /// lexical order is its time order).
    pub created: String,
    /// `spec.rules`, in order.
    pub rules: Vec<Rule>,
}

/// A rule chosen for a model, with the object it came from.
#[derive(Clone, Copy, Debug)]
pub struct Applicable<'a> {
    /// The object's name.
    pub name: &'a Arc<str>,
    /// The rule.
    pub rule: &'a Rule,
}

/// The rules of every object, indexed for lookup by model (rebuilt on every change; the
/// sets are small and change rarely).
#[derive(Debug, Default)]
pub struct RuleIndex {
    /// Exact model -> (object index, rule index), oldest object first.
    exact: HashMap<String, Vec<(usize, usize)>>,
    /// Generic rules, oldest object first.
    generic: Vec<(usize, usize)>,
    sets: Vec<RewriteSet>,
}

impl RuleIndex {
    /// Indexes `sets`.
    pub fn build(mut sets: Vec<RewriteSet>) -> Self {
        // Oldest first; equal timestamps (one-second resolution) fall back to the name so the
        // choice does not depend on arrival order.
        sets.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
        let mut index = Self::default();
        for (s, set) in sets.iter().enumerate() {
            for (r, rule) in set.rules.iter().enumerate() {
                if rule.models.is_empty() {
                    index.generic.push((s, r));
                }
                for model in &rule.models {
                    let slots = index.exact.entry(model.clone()).or_default();
                    if !slots.contains(&(s, r)) {
                        slots.push((s, r));
                    }
                }
            }
        }
        index.sets = sets;
        index
    }

    /// The rule for `model`: the oldest exact match, else the oldest generic rule.
    pub fn rule_for(&self, model: &str) -> Option<Applicable<'_>> {
        let (s, r) = self.exact.get(model).and_then(|v| v.first()).or_else(|| self.generic.first()).copied()?;
        let set = &self.sets[s];
        Some(Applicable { name: &set.name, rule: &set.rules[r] })
    }

    /// Number of objects indexed.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// True when no object is indexed.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

/// Picks a target of `targets` with `rng`: by weight when any target has one (unweighted
/// targets then never win, as in the Go EPPs), uniformly when none has. `None` when empty.
pub fn pick<'a>(targets: &'a [Target], rng: &mut impl Rng) -> Option<&'a Target> {
    let total: u64 = targets.iter().filter_map(|t| t.weight).map(u64::from).sum();
    if total == 0 {
        if targets.is_empty() {
            return None;
        }
        return targets.get(rng.random_range(0..targets.len()));
    }
    let mut roll = rng.random_range(0..total);
    for target in targets {
        let weight = u64::from(target.weight.unwrap_or(0));
        if roll < weight {
            return Some(target);
        }
        roll -= weight;
    }
    targets.last()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn target(model: &str, weight: Option<u32>) -> Target {
        Target { model: model.into(), weight }
    }

    fn set(name: &str, created: &str, rules: Vec<Rule>) -> RewriteSet {
        RewriteSet { name: name.into(), created: created.into(), rules }
    }

    fn rule(models: &[&str], to: &str) -> Rule {
        Rule { models: models.iter().map(|m| m.to_string()).collect(), targets: vec![target(to, None)] }
    }

    #[test]
    fn exact_rules_beat_generic_ones_and_the_oldest_object_wins() {
        let index = RuleIndex::build(vec![
            set("newer", "2026-01-02T00:00:00Z", vec![rule(&["a"], "a-new")]),
            set("generic", "2026-01-01T00:00:00Z", vec![rule(&[], "fallback")]),
            set("older", "2026-01-01T00:00:00Z", vec![rule(&["a", "b"], "a-old")]),
        ]);
        let to = |m: &str| index.rule_for(m).map(|a| (a.name.to_string(), a.rule.targets[0].model.clone()));
        assert_eq!(to("a"), Some(("older".into(), "a-old".into())));
        assert_eq!(to("b"), Some(("older".into(), "a-old".into())));
        assert_eq!(to("zzz"), Some(("generic".into(), "fallback".into())));
        let no_generic = RuleIndex::build(vec![set("x", "2026-01-01T00:00:00Z", vec![rule(&["a"], "b")])]);
        assert!(no_generic.rule_for("other").is_none());
        assert!(RuleIndex::default().rule_for("a").is_none());
    }

    #[test]
    fn weighted_pick_follows_the_weights_deterministically_under_a_seed() {
        let targets = [target("v1", Some(90)), target("v2", Some(10))];
        let mut rng = StdRng::seed_from_u64(7);
        let picks: Vec<_> = (0..1000).map(|_| pick(&targets, &mut rng).unwrap().model.clone()).collect();
        let v2 = picks.iter().filter(|m| *m == "v2").count();
        assert!((60..=140).contains(&v2), "v2 picked {v2} times of 1000 at weight 10%");
        let mut again = StdRng::seed_from_u64(7);
        let replay: Vec<_> = (0..1000).map(|_| pick(&targets, &mut again).unwrap().model.clone()).collect();
        assert_eq!(picks, replay, "same seed, same choices");
    }

    #[test]
    fn unweighted_targets_lose_to_weighted_ones_and_share_evenly_alone() {
        let mut rng = StdRng::seed_from_u64(1);
        let mixed = [target("never", None), target("always", Some(5))];
        assert!((0..200).all(|_| pick(&mixed, &mut rng).unwrap().model == "always"));
        let even = [target("a", None), target("b", None)];
        let a = (0..1000).filter(|_| pick(&even, &mut rng).unwrap().model == "a").count();
        assert!((400..=600).contains(&a), "{a}");
        assert!(pick(&[], &mut rng).is_none());
    }
}
