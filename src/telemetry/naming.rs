//! Which naming family `/metrics` exports (`--metrics-naming`): epp registers most families
//! twice, under the GIE name and its llm-d twin ([`super::twin`]); `gie` or `llm-d` drops the
//! other half of every such pair at exposition, halving those series. Families without a
//! twin (epp's own `epp_*`, llm-d-only or GIE-only series, `process_*`) are always exported.
//!
//! Pairs are recorded when registered. Metric names are fixed strings of this program, so
//! one process-wide table serves every registry (tests start several apps in one process).

use std::collections::HashSet;
use std::sync::{LazyLock, RwLock};

use prometheus::proto::MetricFamily;

/// The naming family exported on `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsNaming {
    /// Both names of every twin pair (as llm-d dual-emits them).
    #[default]
    Both,
    /// GIE names (`inference_*`, llm-d's deprecated `llm_d_inference_scheduler_*`); the llm-d
    /// canonical twin (`llm_d_epp_*`) of a pair is dropped.
    Gie,
    /// llm-d canonical names (`llm_d_epp_*`); the GIE or deprecated twin of a pair is dropped.
    #[value(name = "llm-d")]
    LlmD,
}

/// Twin pairs registered outside [`super::twin`] (their label sets differ between the names).
const OTHER_PAIRS: &[(&str, &str)] = &[
    ("llm_d_inference_scheduler_disagg_decision_total", "llm_d_epp_disagg_decision_total"),
    ("llm_d_inference_scheduler_pd_decision_total", "llm_d_epp_pd_decision_total"),
];

/// Names registered as the GIE (or deprecated) half, and as the llm-d half, of a pair.
#[derive(Default)]
struct Pairs {
    gie: HashSet<String>,
    llmd: HashSet<String>,
}

static PAIRS: LazyLock<RwLock<Pairs>> = LazyLock::new(|| {
    let mut pairs = Pairs::default();
    for (gie, llmd) in OTHER_PAIRS {
        pairs.gie.insert((*gie).to_string());
        pairs.llmd.insert((*llmd).to_string());
    }
    RwLock::new(pairs)
});

/// Records that `gie` and `llmd` name the same family.
pub fn record_twin(gie: &str, llmd: &str) {
    let mut pairs = PAIRS.write().unwrap_or_else(|p| p.into_inner());
    if !pairs.gie.contains(gie) {
        pairs.gie.insert(gie.to_string());
    }
    if !pairs.llmd.contains(llmd) {
        pairs.llmd.insert(llmd.to_string());
    }
}

impl MetricsNaming {
    /// Whether a family named `name` is exported.
    pub fn keeps(self, name: &str) -> bool {
        let pairs = PAIRS.read().unwrap_or_else(|p| p.into_inner());
        match self {
            MetricsNaming::Both => true,
            MetricsNaming::Gie => !pairs.llmd.contains(name),
            MetricsNaming::LlmD => !pairs.gie.contains(name),
        }
    }

    /// `families` without the dropped half.
    pub fn filter(self, mut families: Vec<MetricFamily>) -> Vec<MetricFamily> {
        if self != MetricsNaming::Both {
            families.retain(|f| self.keeps(f.name()));
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_drops_one_half_of_a_pair_and_keeps_singletons() {
        record_twin("naming_test_gie_total", "naming_test_llmd_total");
        let names = ["naming_test_gie_total", "naming_test_llmd_total", "epp_naming_test_own_total"];
        let kept = |mode: MetricsNaming| names.iter().filter(|n| mode.keeps(n)).copied().collect::<Vec<_>>();
        assert_eq!(kept(MetricsNaming::Both), names);
        assert_eq!(kept(MetricsNaming::Gie), ["naming_test_gie_total", "epp_naming_test_own_total"]);
        assert_eq!(kept(MetricsNaming::LlmD), ["naming_test_llmd_total", "epp_naming_test_own_total"]);
        assert!(!MetricsNaming::LlmD.keeps("llm_d_inference_scheduler_pd_decision_total"));
        assert!(!MetricsNaming::Gie.keeps("llm_d_epp_pd_decision_total"));
    }
}
