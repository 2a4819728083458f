//! The scheduler: an immutable pipeline built from the validated config. `schedule` runs the
//! data producers once, then the admitters (the first denial ends the request), then the
//! profile handler loop (pick profiles, run each, combine), then the pre-request hooks, and
//! returns the decision with the header edits. Synchronous, no I/O; safe to call from many
//! threads at once.

use crate::objectives::ObjectiveStore;
use std::sync::Arc;
use std::time::Instant;

use super::metrics::{AdmissionCounters, SchedulerMetrics};
use super::profile::{Profile, ProfileFailure, Slot};
use super::stage::Stage;
use crate::endpoints::model::Candidate;
use crate::framework::ScheduleError;
use crate::framework::context::SchedulingContext;
use crate::framework::data::{DefaultProducers, RequestData};
use crate::framework::plugin::{Admitter, DataProducer, PreRequest, ProfileHandler, ResponseHook, SaturationDetector};
use crate::framework::result::{HeaderEdits, ProfileResults, SchedulingResult};
use crate::request::InferenceRequest;
use crate::request::parsers::ParserSet;
use crate::telemetry::otel;

/// A decision and everything computed on the way.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Chosen endpoints per profile.
    pub result: SchedulingResult,
    /// Data computed by producers.
    pub data: RequestData,
    /// Request-header edits from pre-request hooks.
    pub headers: HeaderEdits,
}

impl Decision {
    /// Id of the primary profile's first target (`""` when none).
    fn target(&self) -> &str {
        self.result.primary().and_then(|p| p.targets.first()).map_or("", |c| &**c.id())
    }
}

/// An admitter with its timer and decision counters.
#[derive(Clone, Debug)]
pub struct AdmitterSlot {
    /// The plugin and its `Admission` timer.
    pub slot: Slot<dyn Admitter>,
    /// `epp_admitter_decisions_total` children.
    pub counters: AdmissionCounters,
}

/// Everything a [`Scheduler`] is built from (the config loader fills it); one value, so
/// a scheduler is complete the moment it exists.
#[derive(Debug)]
pub struct SchedulerParts {
    /// The profile handler.
    pub handler: Slot<dyn ProfileHandler>,
    /// Profiles by name, in declaration order.
    pub profiles: Vec<Profile>,
    /// Producers in dependency order.
    pub producers: Vec<Slot<dyn DataProducer>>,
    /// Admitters (every instantiated plugin with that role, in declaration order).
    pub admitters: Vec<AdmitterSlot>,
    /// Pre-request hooks (every instantiated plugin with that role).
    pub pre_request: Vec<Slot<dyn PreRequest>>,
    /// Response hooks.
    pub response: Vec<Arc<dyn ResponseHook>>,
    /// The producer that answers, per data kind, for consumers that name none.
    pub defaults: DefaultProducers,
    /// Metric handles.
    pub metrics: SchedulerMetrics,
    /// Saturation detector: sheds sheddable requests (legacy rule) or drives Flow Control.
    pub saturation: Option<Arc<dyn SaturationDetector>>,
    /// Apply the legacy rule (priority < 0 and saturation >= 1 -> 429); off when Flow
    /// Control admits requests instead.
    pub legacy_shedding: bool,
    /// Objective priorities (InferenceObjective objects, else `--objective`) and model
    /// rewrites (InferenceModelRewrite objects); the request's objective header selects a
    /// priority, negative = sheddable.
    pub objectives: ObjectiveStore,
    /// The request parsers the config selects (`parser` / `requestHandler.parsers`); the
    /// stream parses each body with the one its path resolves to.
    pub parsers: ParserSet,
    /// What the asynchronous stage before the decision awaits.
    pub stage: Stage,
}

/// The immutable scheduling pipeline, built once from [`SchedulerParts`]; shared between
/// requests through a [`super::handle::SchedulerHandle`].
#[derive(Debug)]
pub struct Scheduler {
    handler: Slot<dyn ProfileHandler>,
    profiles: Vec<Profile>,
    producers: Vec<Slot<dyn DataProducer>>,
    admitters: Vec<AdmitterSlot>,
    pre_request: Vec<Slot<dyn PreRequest>>,
    response: Vec<Arc<dyn ResponseHook>>,
    defaults: DefaultProducers,
    metrics: SchedulerMetrics,
    saturation: Option<Arc<dyn SaturationDetector>>,
    legacy_shedding: bool,
    objectives: ObjectiveStore,
    parsers: ParserSet,
    stage: Stage,
    profile_names: Vec<Arc<str>>,
}

impl Scheduler {
    /// A scheduler from its parts.
    pub fn new(parts: SchedulerParts) -> Self {
        let SchedulerParts {
            handler,
            profiles,
            producers,
            admitters,
            pre_request,
            response,
            defaults,
            metrics,
            saturation,
            legacy_shedding,
            objectives,
            parsers,
            stage,
        } = parts;
        let profile_names = profiles.iter().map(|p| p.name.clone()).collect();
        Self {
            handler,
            profiles,
            producers,
            admitters,
            pre_request,
            response,
            defaults,
            metrics,
            saturation,
            legacy_shedding,
            objectives,
            parsers,
            stage,
            profile_names,
        }
    }

    /// The same scheduler with `objectives` (priorities and model rewrites) replacing the
    /// config's; for the app, before the scheduler is shared.
    pub fn with_objectives(mut self, objectives: ObjectiveStore) -> Self {
        self.objectives = objectives;
        self
    }

    /// The profile handler.
    pub fn handler(&self) -> &Slot<dyn ProfileHandler> {
        &self.handler
    }

    /// Profiles in declaration order.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// Data producers in run order.
    pub fn producers(&self) -> &[Slot<dyn DataProducer>] {
        &self.producers
    }

    /// Admitters in declaration order.
    pub fn admitters(&self) -> &[AdmitterSlot] {
        &self.admitters
    }

    /// Pre-request hooks.
    pub fn pre_request(&self) -> &[Slot<dyn PreRequest>] {
        &self.pre_request
    }

    /// Response hooks (the stream calls them on the response path).
    pub fn response_hooks(&self) -> &[Arc<dyn ResponseHook>] {
        &self.response
    }

    /// The default producer of each data kind.
    pub fn defaults(&self) -> &DefaultProducers {
        &self.defaults
    }

    /// The saturation detector, when one is configured.
    pub fn saturation(&self) -> Option<&Arc<dyn SaturationDetector>> {
        self.saturation.as_ref()
    }

    /// True when the legacy shedding rule applies (no Flow Control).
    pub fn legacy_shedding(&self) -> bool {
        self.legacy_shedding
    }

    /// The configured request parsers.
    pub fn parsers(&self) -> &ParserSet {
        &self.parsers
    }

    /// Objective priorities and model rewrites.
    pub fn objectives(&self) -> &ObjectiveStore {
        &self.objectives
    }

    /// What the asynchronous stage before the decision awaits.
    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// The request's priority: its objective's (`objectives`), else `request.priority`.
    pub fn priority(&self, request: &InferenceRequest) -> i32 {
        request.headers.objective().and_then(|o| self.objectives.priority(o)).unwrap_or(request.priority)
    }

    /// Runs the data producers for a request.
    pub fn produce(&self, request: &InferenceRequest, candidates: &[Candidate]) -> RequestData {
        self.produce_into(request, candidates, RequestData::default())
    }

    /// Runs the data producers over `data` whose phase 1 (`scheduling::stage`) is filled.
    fn produce_into(&self, request: &InferenceRequest, candidates: &[Candidate], mut data: RequestData) -> RequestData {
        data.set_defaults(&self.defaults);
        for p in &self.producers {
            let start = Instant::now();
            p.plugin.produce(request, candidates, &mut data);
            p.timer.observe(start.elapsed().as_secs_f64());
        }
        data
    }

    /// Asks every admitter in turn; the first denial becomes `NotAdmitted`.
    fn admit(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Result<(), ScheduleError> {
        if self.admitters.is_empty() {
            return Ok(());
        }
        let priority = self.priority(cx.request);
        for a in &self.admitters {
            let start = Instant::now();
            let verdict = a.slot.plugin.admit(cx, priority, candidates);
            a.slot.timer.observe(start.elapsed().as_secs_f64());
            match verdict {
                Ok(()) => a.counters.admitted.inc(),
                Err(reason) => {
                    a.counters.rejected.inc();
                    tracing::debug!(plugin = %a.slot.name, %reason, "Admitter denied the request");
                    return Err(ScheduleError::NotAdmitted { reason });
                }
            }
        }
        Ok(())
    }

    /// Schedules a request over `candidates` (already restricted by the subset hint).
    pub fn schedule(&self, request: &InferenceRequest, candidates: Vec<Candidate>) -> Result<Decision, ScheduleError> {
        self.schedule_with(request, RequestData::default(), candidates)
    }

    /// Schedules a request whose phase-1 data (`scheduling::stage::before_decision`) is
    /// `awaited`.
    pub fn schedule_with(
        &self,
        request: &InferenceRequest,
        awaited: RequestData,
        candidates: Vec<Candidate>,
    ) -> Result<Decision, ScheduleError> {
        let start = Instant::now();
        let span = otel::schedule_span(candidates.len());
        let outcome = span.in_scope(|| self.schedule_inner(request, awaited, candidates));
        self.metrics.record_decision(start.elapsed().as_secs_f64(), outcome.is_ok());
        otel::record_schedule(&span, outcome.as_ref().map(Decision::target).map_err(|_| "failed"));
        outcome
    }

    fn schedule_inner(
        &self,
        request: &InferenceRequest,
        awaited: RequestData,
        candidates: Vec<Candidate>,
    ) -> Result<Decision, ScheduleError> {
        if candidates.is_empty() {
            return Err(ScheduleError::NoCandidates);
        }
        if self.legacy_shedding
            && self.priority(request) < 0
            && let Some(detector) = &self.saturation
            && detector.saturation(&candidates, tokio::time::Instant::now()) >= 1.0
        {
            return Err(ScheduleError::Saturated);
        }
        let data = self.produce_into(request, &candidates, awaited);
        let cx = SchedulingContext { request, data: &data, now: tokio::time::Instant::now() };
        self.admit(&cx, &candidates)?;
        let mut results = ProfileResults::default();
        let mut last_failure = None;
        // Bounded: each round must run at least one profile not evaluated before.
        for _ in 0..=self.profiles.len() {
            let picked = self.handler.plugin.pick(&cx, &self.profile_names, &results);
            let fresh: Vec<_> = picked.into_iter().filter(|n| !results.was_evaluated(n)).collect();
            if fresh.is_empty() {
                break;
            }
            for name in fresh {
                let Some(profile) = self.profiles.iter().find(|p| p.name == name) else {
                    results.insert(name, None);
                    continue;
                };
                match profile.run(&cx, candidates.clone()) {
                    Ok(r) => results.insert(name, Some(r)),
                    Err(failure) => {
                        last_failure = Some((name.clone(), failure));
                        results.insert(name, None);
                    }
                }
            }
        }
        if results.entries.is_empty() {
            return Err(ScheduleError::NoProfileRan);
        }
        let result = self.handler.plugin.process_results(&cx, results).map_err(|e| match (e, last_failure) {
            (ScheduleError::NoResult { .. }, Some((profile, ProfileFailure::Filtered { filter }))) => {
                ScheduleError::AllFiltered { profile: profile.to_string(), filter: filter.to_string() }
            }
            (e, _) => e,
        })?;
        let mut headers = HeaderEdits::default();
        for hook in &self.pre_request {
            let start = Instant::now();
            hook.plugin.pre_request(&cx, &result, &mut headers);
            hook.timer.observe(start.elapsed().as_secs_f64());
        }
        Ok(Decision { result, data, headers })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::framework::build::{BuildContext, BuildError, PluginSpec};
    use crate::framework::plugin::{Admitter, PluginInstance};
    use crate::plugins::registry::builtin;
    use crate::test_util::{chat_request, endpoint};

    /// Admits or denies everything.
    #[derive(Debug)]
    struct Fixed(bool);

    impl Admitter for Fixed {
        fn admit(&self, _: &SchedulingContext<'_>, _: i32, _: &[Candidate]) -> Result<(), String> {
            if self.0 { Ok(()) } else { Err("fixed denial".into()) }
        }
    }

    fn allow(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
        Ok(PluginInstance::new(spec.name.clone(), "allow-admitter").with_admitter(Arc::new(Fixed(true))))
    }

    fn deny(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
        Ok(PluginInstance::new(spec.name.clone(), "deny-admitter").with_admitter(Arc::new(Fixed(false))))
    }

    #[test]
    fn admitters_run_in_order_and_the_first_denial_stops_the_request() {
        let mut registry = builtin();
        registry.add("allow-admitter", allow).add("deny-admitter", deny);
        let metrics = SchedulerMetrics::detached();
        let text = "plugins: [{type: allow-admitter, name: first}, {type: deny-admitter, name: no}, \
                    {type: allow-admitter, name: last}, {type: queue-scorer}]";
        let loaded = crate::config::load(text, &registry, &BuildContext::default(), metrics.clone()).expect("loads");
        let outcome = loaded.scheduler.schedule(&chat_request("m", &["hi"]), vec![endpoint("a").build()]);
        assert_eq!(outcome.map(|_| ()), Err(ScheduleError::NotAdmitted { reason: "fixed denial".into() }));
        let count = |t, n, admitted: bool| {
            let c = metrics.admission_counters(t, n);
            if admitted { c.admitted.get() } else { c.rejected.get() }
        };
        assert_eq!(count("allow-admitter", "first", true), 1);
        assert_eq!(count("deny-admitter", "no", false), 1);
        assert_eq!(count("allow-admitter", "last", true), 0, "never asked after the denial");
        // Without the denying admitter the request is scheduled.
        let text = "plugins: [{type: allow-admitter}, {type: queue-scorer}]";
        let loaded = crate::config::load(text, &registry, &BuildContext::default(), metrics).expect("loads");
        assert!(loaded.scheduler.schedule(&chat_request("m", &["hi"]), vec![endpoint("a").build()]).is_ok());
    }
}
