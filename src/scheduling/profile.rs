//! A scheduling profile: filters in declared order, weighted scorers, one picker. Running it
//! is a pure function of the context and the candidates; each plugin call is timed.

use std::sync::Arc;
use std::time::Instant;

use crate::endpoints::model::Candidate;
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, Picker, PluginName, ScoredCandidate, Scorer};
use crate::framework::result::ProfileResult;
use crate::telemetry::otel;
use crate::telemetry::twin::TwinHistogram;

/// A plugin in a profile slot, with its timer.
#[derive(Debug)]
pub struct Slot<T: ?Sized> {
    /// Instance name.
    pub name: PluginName,
    /// The plugin.
    pub plugin: Arc<T>,
    /// Latency histogram child.
    pub timer: TwinHistogram,
}

impl<T: ?Sized> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Self { name: self.name.clone(), plugin: self.plugin.clone(), timer: self.timer.clone() }
    }
}

/// A scorer with its weight.
#[derive(Clone, Debug)]
pub struct WeightedScorer {
    /// The scorer slot.
    pub slot: Slot<dyn Scorer>,
    /// Finite, non-negative weight.
    pub weight: f64,
}

/// One scheduling profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Profile name.
    pub name: Arc<str>,
    /// Filters in order.
    pub filters: Vec<Slot<dyn Filter>>,
    /// Weighted scorers.
    pub scorers: Vec<WeightedScorer>,
    /// The picker.
    pub picker: Slot<dyn Picker>,
}

/// Why a profile produced no endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileFailure {
    /// A filter left no candidate.
    Filtered {
        /// The filter that emptied the set.
        filter: PluginName,
    },
    /// The picker returned nothing.
    NothingPicked,
}

fn timed<R>(timer: &TwinHistogram, span: tracing::Span, f: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let r = span.in_scope(f);
    timer.observe(start.elapsed().as_secs_f64());
    r
}

impl Profile {
    /// Runs the profile on `candidates`.
    pub fn run(
        &self,
        cx: &SchedulingContext<'_>,
        mut candidates: Vec<Candidate>,
    ) -> Result<ProfileResult, ProfileFailure> {
        let _span = otel::profile_span(&self.name).entered();
        for f in &self.filters {
            candidates = timed(&f.timer, otel::plugin_span("filter", &f.name), || f.plugin.filter(cx, candidates));
            if candidates.is_empty() {
                return Err(ProfileFailure::Filtered { filter: f.name.clone() });
            }
        }
        let mut totals = vec![0.0f64; candidates.len()];
        for s in &self.scorers {
            let scores = timed(&s.slot.timer, otel::plugin_span("scorer", &s.slot.name), || {
                s.slot.plugin.score(cx, &candidates)
            });
            for (total, score) in totals.iter_mut().zip(scores) {
                let clamped = if score.is_nan() { 0.0 } else { score.clamp(0.0, 1.0) };
                *total += s.weight * clamped;
            }
        }
        let scored =
            candidates.into_iter().zip(totals).map(|(candidate, score)| ScoredCandidate { candidate, score }).collect();
        let picker = otel::plugin_span("picker", &self.picker.name);
        let targets = timed(&self.picker.timer, picker, || self.picker.plugin.pick(cx, scored));
        if targets.is_empty() {
            return Err(ProfileFailure::NothingPicked);
        }
        Ok(ProfileResult { targets })
    }
}
