//! `disagg-profile-handler`: prefill/decode (and encode) disaggregation, reference section 8.
//!
//! Decode-first (default): run `decode`; no decode endpoint -> stop (the request fails with
//! "failed to find available decode workers"). Then, when an encode profile exists and the
//! encode decider says yes for the chosen decode endpoint, run `encode`; then, when a prefill
//! profile exists and the prefill decider says yes, run `prefill`. No decider = that stage is
//! off. Prefill-first: run prefill (no decider), then encode (decider sees no endpoint), then
//! decode. A prefill or encode profile that finds no endpoint does not fail the request: it
//! goes decode-only. The primary profile is decode; prefill/encode results are included when
//! they found endpoints. Each decision is counted in `llm_d_epp_disagg_decision_total`.
//! The pre-request writes `x-prefiller-host-port` / `x-encoder-hosts-ports`
//! (`disagg_headers`).
//!
//! Parameters: `profiles.{decode,prefill,encode}` (`decode`, `prefill`, `encode`),
//! `deciders.{prefill,encode}` (names of decider plugins declared earlier), `stageOrder`
//! (`decode-first`); legacy flat keys in `params`. The deprecated `pd-profile-handler` maps
//! its own keys onto the same handler (`pd`). Before returning `{prefill}` (decode-first) or
//! `{decode}` (prefill-first) the handler records the endpoint already chosen for the other
//! side as `peer-endpoint` (`RequestData::peer_endpoint`), readable by that profile's plugins.

pub mod params;
pub mod pd;

use std::sync::Arc;

use prometheus::IntCounterVec;

use super::disagg_headers;
use crate::endpoints::model::Candidate;
use crate::framework::ScheduleError;
use crate::framework::build::{BuildContext, BuildError, PluginSpec};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Decider, PluginInstance, PluginName, PreRequest, ProfileHandler};
use crate::framework::result::{HeaderEdits, ProfileResults, SchedulingResult};
use crate::request::headers::DATA_PARALLEL_HOST_PORT;
use params::{DeciderRef, Settings, StageOrder};

/// Type name.
pub const TYPE: &str = "disagg-profile-handler";

/// The handler.
#[derive(Debug)]
pub struct DisaggHandler {
    name: PluginName,
    type_name: &'static str,
    decode: Arc<str>,
    prefill: Arc<str>,
    encode: Arc<str>,
    prefill_decider: Option<Arc<dyn Decider>>,
    encode_decider: Option<Arc<dyn Decider>>,
    order: StageOrder,
    /// Sidecar port for data-parallel routing (`pd-profile-handler` `primaryPort`).
    primary_port: Option<u16>,
    /// `llm_d_epp_disagg_decision_total`, or `llm_d_epp_pd_decision_total` for `pd-profile-handler`.
    decisions: IntCounterVec,
    decisions_legacy: IntCounterVec,
    /// The request's model as a bounded label value (count and length).
    models: crate::telemetry::labels::BoundedLabels,
}

/// Distinct model names kept as decision-counter label values (later ones count as `other`).
const MODEL_LABEL_CAP: usize = 100;

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let settings = params::settings(spec)?;
    let prefill = settings.prefill_decider.as_ref().map(|d| resolve(cx, spec, d)).transpose()?;
    let encode = settings.encode_decider.as_ref().map(|d| resolve(cx, spec, d)).transpose()?;
    Ok(instance(spec, cx, TYPE, settings, prefill, encode, None))
}

fn resolve(cx: &BuildContext, spec: &PluginSpec, d: &DeciderRef) -> Result<Arc<dyn Decider>, BuildError> {
    cx.resolve(spec, d.param, &d.name, "decider", |i| i.decider.clone())
}

fn instance(
    spec: &PluginSpec,
    cx: &BuildContext,
    type_name: &'static str,
    s: Settings,
    prefill_decider: Option<Arc<dyn Decider>>,
    encode_decider: Option<Arc<dyn Decider>>,
    primary_port: Option<u16>,
) -> PluginInstance {
    // `pd-profile-handler` counts in its own family instead of the disagg one.
    let (decisions, decisions_legacy) = if type_name == pd::TYPE {
        (cx.metrics.pd_decisions.clone(), cx.metrics.pd_decisions_legacy.clone())
    } else {
        (cx.metrics.disagg_decisions.clone(), cx.metrics.disagg_decisions_legacy.clone())
    };
    let handler = Arc::new(DisaggHandler {
        name: spec.name.clone(),
        type_name,
        decode: s.decode.into(),
        prefill: s.prefill.into(),
        encode: s.encode.into(),
        prefill_decider,
        encode_decider,
        order: s.order,
        primary_port,
        decisions,
        decisions_legacy,
        models: crate::telemetry::labels::BoundedLabels::new(MODEL_LABEL_CAP),
    });
    PluginInstance::new(spec.name.clone(), type_name).with_profile_handler(handler.clone()).with_pre_request(handler)
}

fn says(decider: &Option<Arc<dyn Decider>>, cx: &SchedulingContext<'_>, endpoint: Option<&Candidate>) -> bool {
    decider.as_ref().is_some_and(|d| d.disaggregate(cx, endpoint))
}

impl DisaggHandler {
    fn decode_first(
        &self,
        cx: &SchedulingContext<'_>,
        has: &dyn Fn(&str) -> bool,
        results: &ProfileResults,
    ) -> Option<Arc<str>> {
        if !results.was_evaluated(&self.decode) {
            return has(&self.decode).then(|| self.decode.clone());
        }
        let decode = results.get(&self.decode).and_then(|r| r.targets.first())?;
        // Deciders are pure, so asking again on a later round gives the same answer.
        if has(&self.encode) && !results.was_evaluated(&self.encode) && says(&self.encode_decider, cx, Some(decode)) {
            return Some(self.encode.clone());
        }
        if has(&self.prefill) && !results.was_evaluated(&self.prefill) && says(&self.prefill_decider, cx, Some(decode))
        {
            // `peer-endpoint` for the prefill profile; already set only if asked twice.
            let _ = cx.data.peer_endpoint.set(decode.clone());
            return Some(self.prefill.clone());
        }
        None
    }

    fn prefill_first(
        &self,
        cx: &SchedulingContext<'_>,
        has: &dyn Fn(&str) -> bool,
        results: &ProfileResults,
    ) -> Option<Arc<str>> {
        if has(&self.prefill) && !results.was_evaluated(&self.prefill) {
            return Some(self.prefill.clone());
        }
        if has(&self.encode) && !results.was_evaluated(&self.encode) && says(&self.encode_decider, cx, None) {
            return Some(self.encode.clone());
        }
        if !has(&self.decode) || results.was_evaluated(&self.decode) {
            return None;
        }
        // `peer-endpoint` for the decode profile: the prefill pick, when prefill found one.
        if let Some(prefill) = results.get(&self.prefill).and_then(|r| r.targets.first()) {
            let _ = cx.data.peer_endpoint.set(prefill.clone());
        }
        Some(self.decode.clone())
    }

    fn record(&self, model: &str, prefill: bool, encode: bool) {
        let decision = match (encode, prefill) {
            (false, false) => "decode-only",
            (false, true) => "prefill-decode",
            (true, false) => "encode-decode",
            (true, true) => "encode-prefill-decode",
        };
        let model = self.models.get(model);
        self.decisions.with_label_values(&[&*self.name, self.type_name, &model, decision]).inc();
        self.decisions_legacy.with_label_values(&[&model, decision]).inc();
    }
}

impl ProfileHandler for DisaggHandler {
    fn pick(&self, cx: &SchedulingContext<'_>, profiles: &[Arc<str>], results: &ProfileResults) -> Vec<Arc<str>> {
        let has = |name: &str| profiles.iter().any(|p| &**p == name);
        let next = match self.order {
            StageOrder::DecodeFirst => self.decode_first(cx, &has, results),
            StageOrder::PrefillFirst => self.prefill_first(cx, &has, results),
        };
        next.into_iter().collect()
    }

    fn process_results(
        &self,
        cx: &SchedulingContext<'_>,
        results: ProfileResults,
    ) -> Result<SchedulingResult, ScheduleError> {
        if results.get(&self.decode).is_none_or(|r| r.targets.is_empty()) {
            return Err(ScheduleError::NoResult { reason: "failed to find available decode workers".into() });
        }
        let profiles: Vec<_> = results
            .entries
            .into_iter()
            .filter_map(|(n, r)| r.filter(|r| !r.targets.is_empty()).map(|r| (n, r)))
            .collect();
        let ran = |name: &str| profiles.iter().any(|(n, _)| &**n == name);
        self.record(&cx.request.target_model, ran(&self.prefill), ran(&self.encode));
        let mut result = SchedulingResult::new(self.decode.clone(), profiles);
        result.destination_port = self.primary_port;
        Ok(result)
    }
}

impl PreRequest for DisaggHandler {
    fn pre_request(&self, _: &SchedulingContext<'_>, result: &SchedulingResult, headers: &mut HeaderEdits) {
        disagg_headers::apply(result, &self.prefill, &self.encode, headers);
        if self.primary_port.is_some()
            && let Some(target) = result.primary().and_then(|r| r.targets.first())
        {
            headers.set(DATA_PARALLEL_HOST_PORT, target.endpoint.host_port.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
