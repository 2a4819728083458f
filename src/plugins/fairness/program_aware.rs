//! `program-aware-fairness` (llm-d): a Flow Control fairness policy that shares a priority
//! band between programs (fairness ids: `x-llm-d-inference-fairness-id`, else
//! `x-gateway-inference-fairness-id`, else `default-flow`) by Least Attained Service (see
//! `las`): the program that consumed the fewest weighted tokens recently is served next, the
//! age of each program's oldest queued request breaking ties on a cold start.
//!
//! Lifecycle: the queue asks `pick` for the next flow and reports each dispatch with its
//! queue wait; the pre-request hook counts the request in flight; the response-complete hook
//! (also run when the client goes away) adds `prompt + 2 x completion` tokens from the
//! response usage (none known = no cost) and releases it. Attained service decays in wall
//! clock time, applied lazily whenever it is read or added to. Programs with nothing in
//! flight and no completion for `evictionTtlSeconds` are forgotten (state and metric
//! series) by a sweep that runs at most every `evictionSweepSeconds`, on the next call after
//! that period (no background task).
//!
//! Parameters: `strategy` (`las`, the only one), `lasWeightService` (0.8, >= 0),
//! `lasWeightHeadWait` (0.2, >= 0), `lasHalfLifeSeconds` (60, >= 0; > 0 = service halves
//! every this many seconds), `lasDecayFactor` (0.99997, in (0, 1]; per-second factor used
//! when `lasHalfLifeSeconds` is 0), `evictionTtlSeconds` (3600, >= 0; 0 = never evict),
//! `evictionSweepSeconds` (300, > 0). Referenced from `flowControl` bands by
//! `fairnessPolicyRef`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::las::{self, Decay, Program};
use super::metrics::ProgramAwareMetrics;
use crate::flowcontrol::DEFAULT_FLOW;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{FairnessPolicy, FlowView, PluginInstance, PreRequest, ResponseHook};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::request::InferenceRequest;
use crate::request::usage::Usage;

/// Type name.
pub const TYPE: &str = "program-aware-fairness";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Scoring strategy (`las`).
    pub strategy: String,
    /// Weight of the inverted attained service.
    pub las_weight_service: f64,
    /// Weight of the head-of-queue age.
    pub las_weight_head_wait: f64,
    /// Per-second decay factor (used when the half-life is 0).
    pub las_decay_factor: f64,
    /// Half-life of attained service, seconds (0 = use the factor).
    pub las_half_life_seconds: f64,
    /// Idle time after which a program is forgotten, seconds (0 = never).
    pub eviction_ttl_seconds: f64,
    /// Minimum time between eviction sweeps, seconds.
    pub eviction_sweep_seconds: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            strategy: "las".into(),
            las_weight_service: 0.8,
            las_weight_head_wait: 0.2,
            las_decay_factor: 0.99997,
            las_half_life_seconds: 60.0,
            eviction_ttl_seconds: 3600.0,
            eviction_sweep_seconds: 300.0,
        }
    }
}

impl Params {
    /// Checks ranges; `Err((parameter, message))`.
    fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let non_negative = |v: f64| v >= 0.0 && v.is_finite();
        if self.strategy != "las" {
            return Err(("strategy", "must be \"las\" (the only strategy of this build)"));
        }
        for (key, v) in [
            ("lasWeightService", self.las_weight_service),
            ("lasWeightHeadWait", self.las_weight_head_wait),
            ("lasHalfLifeSeconds", self.las_half_life_seconds),
            ("evictionTtlSeconds", self.eviction_ttl_seconds),
        ] {
            if !non_negative(v) {
                return Err((key, "must be a finite number >= 0"));
            }
        }
        if !(self.las_decay_factor > 0.0 && self.las_decay_factor <= 1.0) {
            return Err(("lasDecayFactor", "must be within (0, 1]"));
        }
        if !(self.eviction_sweep_seconds > 0.0 && self.eviction_sweep_seconds.is_finite()) {
            return Err(("evictionSweepSeconds", "must be a finite number > 0"));
        }
        Ok(())
    }
}

/// Mutable state behind one lock (held only for bookkeeping, never across calls out).
#[derive(Debug)]
struct State {
    programs: HashMap<String, Program>,
    last_sweep: Instant,
}

/// The policy plugin.
#[derive(Debug)]
pub struct ProgramAwareFairness {
    weight_service: f64,
    weight_head_wait: f64,
    decay: Decay,
    /// `None` = never evict.
    eviction_ttl: Option<Duration>,
    sweep_every: Duration,
    state: Mutex<State>,
    metrics: Arc<ProgramAwareMetrics>,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    p.check().map_err(|(key, msg)| BuildError::new(format!("{}.parameters.{key}", spec.path), msg))?;
    let plugin = Arc::new(ProgramAwareFairness::new(&p, cx.metrics.program_aware.clone()));
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_fairness(plugin.clone())
        .with_pre_request(plugin.clone())
        .with_response(plugin))
}

/// The program of a request: its fairness id, else `default-flow`.
fn program_of(request: &InferenceRequest) -> &str {
    request.headers.fairness_id().unwrap_or(DEFAULT_FLOW)
}

impl ProgramAwareFairness {
    /// A policy with validated parameters.
    pub fn new(p: &Params, metrics: Arc<ProgramAwareMetrics>) -> Self {
        let decay = if p.las_half_life_seconds > 0.0 {
            Decay::HalfLife(p.las_half_life_seconds)
        } else {
            Decay::PerSecond(p.las_decay_factor)
        };
        Self {
            weight_service: p.las_weight_service,
            weight_head_wait: p.las_weight_head_wait,
            decay,
            eviction_ttl: (p.eviction_ttl_seconds > 0.0).then(|| Duration::from_secs_f64(p.eviction_ttl_seconds)),
            sweep_every: Duration::from_secs_f64(p.eviction_sweep_seconds),
            state: Mutex::new(State { programs: HashMap::new(), last_sweep: Instant::now() }),
            metrics,
        }
    }

    /// Locks the state and runs a due eviction sweep first.
    fn state(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(s.last_sweep) >= self.sweep_every {
            s.last_sweep = now;
            if let Some(ttl) = self.eviction_ttl {
                let idle: Vec<String> = s
                    .programs
                    .iter()
                    .filter(|(_, p)| p.in_flight == 0 && now.saturating_duration_since(p.last_completion) > ttl)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in idle {
                    s.programs.remove(&id);
                    self.metrics.forget(&id);
                }
            }
        }
        s
    }

    /// Known programs now (after any due sweep).
    pub fn programs(&self) -> usize {
        self.state(Instant::now()).programs.len()
    }

    /// A program's attained service now (0 for an unknown program).
    pub fn attained_service(&self, program: &str) -> f64 {
        let now = Instant::now();
        let decay = self.decay;
        self.state(now).programs.get_mut(program).map_or(0.0, |p| p.service(now, decay))
    }
}

impl FairnessPolicy for ProgramAwareFairness {
    fn pick(&self, flows: &[FlowView<'_>], now: Instant) -> usize {
        let decay = self.decay;
        let mut s = self.state(now);
        let candidates: Vec<(f64, f64)> = flows
            .iter()
            .map(|f| {
                let program = s.programs.entry(f.id.to_string()).or_insert_with(|| Program::new(now));
                let waited_ms = now.saturating_duration_since(f.head_enqueued).as_secs_f64() * 1000.0;
                (program.service(now, decay), waited_ms)
            })
            .collect();
        las::pick(&candidates, self.weight_service, self.weight_head_wait).unwrap_or(0)
    }

    fn dispatched(&self, id: &str, waited: Duration) {
        let now = Instant::now();
        let mut s = self.state(now);
        let program = s.programs.entry(id.to_string()).or_insert_with(|| Program::new(now));
        program.record_wait(waited);
        self.metrics.average_wait(id, program.average_wait_ms());
        let index = las::jain(s.programs.values().filter(|p| p.waits > 0).map(Program::average_wait_ms));
        self.metrics.fairness_index(index);
    }
}

impl PreRequest for ProgramAwareFairness {
    fn pre_request(&self, cx: &SchedulingContext<'_>, _: &SchedulingResult, _: &mut HeaderEdits) {
        let now = Instant::now();
        let mut s = self.state(now);
        let program = s.programs.entry(program_of(cx.request).to_string()).or_insert_with(|| Program::new(now));
        program.in_flight += 1;
        program.dispatched += 1;
    }
}

impl ResponseHook for ProgramAwareFairness {
    fn on_response_complete(&self, request: &InferenceRequest, _: &SchedulingResult, usage: Option<&Usage>) {
        let now = Instant::now();
        let decay = self.decay;
        let id = program_of(request);
        let mut s = self.state(now);
        let program = s.programs.entry(id.to_string()).or_insert_with(|| Program::new(now));
        program.in_flight = program.in_flight.saturating_sub(1);
        program.last_completion = now;
        let (prompt, completion) = usage.map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
        let service = program.add_service(now, decay, prompt, completion);
        program.set_service(service);
        self.metrics.attained(id, service);
    }
}

#[cfg(test)]
mod tests;
