//! `concurrency-detector`: a saturation detector (and, when placed in a profile, a filter)
//! based on what this EPP has in flight per endpoint, counted by its own ledger: the
//! pre-request adds the primary target (one request; tokens = the request's uncached tokens
//! from the default in-flight producer when present, else its prompt token count), the
//! response hook releases it at completion.
//!
//! Capacity per endpoint: `maxConcurrency` requests (mode `requests`) or
//! `maxTokenConcurrency` tokens (mode `tokens`). Saturation = sum in flight / sum capacity
//! over the candidates (empty -> 1.0). Filter: keeps endpoints with in flight < capacity x
//! (1 + headroom); none left -> the input unchanged (fail-open, like `utilization-detector`).
//!
//! Parameters: `concurrencyMode` (`requests` | `tokens`; `requests`), `maxConcurrency` (100,
//! > 0), `maxTokenConcurrency` (1000000, > 0), `headroom` (0, >= 0).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance, PreRequest, ResponseHook, SaturationDetector};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::plugins::producer::inflight::state::Ledger;
use crate::request::InferenceRequest;
use crate::request::usage::Usage;

/// Type name.
pub const TYPE: &str = "concurrency-detector";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `requests` or `tokens`.
    pub concurrency_mode: String,
    /// Requests per endpoint.
    pub max_concurrency: i64,
    /// Tokens per endpoint.
    pub max_token_concurrency: i64,
    /// Allowance over capacity for the filter.
    pub headroom: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            concurrency_mode: "requests".into(),
            max_concurrency: 100,
            max_token_concurrency: 1_000_000,
            headroom: 0.0,
        }
    }
}

/// The detector.
#[derive(Debug)]
pub struct ConcurrencyDetector {
    tokens: bool,
    capacity: f64,
    headroom: f64,
    ledger: Ledger,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let tokens = match p.concurrency_mode.as_str() {
        "requests" => false,
        "tokens" => true,
        other => {
            return Err(BuildError::new(at("concurrencyMode"), format!("unknown mode {other:?} (requests or tokens)")));
        }
    };
    let (key, capacity) =
        if tokens { ("maxTokenConcurrency", p.max_token_concurrency) } else { ("maxConcurrency", p.max_concurrency) };
    if capacity <= 0 {
        return Err(BuildError::new(at(key), "must be > 0"));
    }
    if p.headroom.is_nan() || p.headroom < 0.0 {
        return Err(BuildError::new(at("headroom"), "must be >= 0"));
    }
    let d = Arc::new(ConcurrencyDetector {
        tokens,
        capacity: capacity as f64,
        headroom: p.headroom,
        ledger: Ledger::default(),
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_saturation(d.clone())
        .with_filter(d.clone())
        .with_pre_request(d.clone())
        .with_response(d))
}

impl ConcurrencyDetector {
    fn in_flight(&self, c: &Candidate) -> f64 {
        let (requests, tokens) = self.ledger.load(c.id());
        (if self.tokens { tokens } else { requests }) as f64
    }
}

impl SaturationDetector for ConcurrencyDetector {
    fn saturation(&self, candidates: &[Candidate], _: tokio::time::Instant) -> f64 {
        if candidates.is_empty() {
            return 1.0;
        }
        candidates.iter().map(|c| self.in_flight(c)).sum::<f64>() / (self.capacity * candidates.len() as f64)
    }
}

impl Filter for ConcurrencyDetector {
    fn filter(&self, _: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let limit = self.capacity * (1.0 + self.headroom);
        let fits = |c: &Candidate| self.in_flight(c) < limit;
        if candidates.iter().any(fits) { candidates.into_iter().filter(fits).collect() } else { candidates }
    }
}

impl PreRequest for ConcurrencyDetector {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let Some(target) = result.primary().and_then(|r| r.targets.first()) else { return };
        let uncached = cx.data.inflight.get(None).and_then(|l| l.uncached_tokens.get(target.id()).copied());
        let tokens = uncached.unwrap_or_else(|| cx.data.tokens.as_ref().map_or(0, |t| t.len() as u64));
        self.ledger.add(&cx.request.request_id, vec![(target.id().clone(), tokens, false)]);
    }
}

impl ResponseHook for ConcurrencyDetector {
    fn on_response_complete(&self, request: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {
        self.ledger.release(&request.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::RequestData;
    use crate::framework::result::ProfileResult;
    use crate::test_util::{chat_request, context_for, endpoint};

    #[test]
    fn saturation_and_filter_follow_the_ledger() {
        let d = ConcurrencyDetector { tokens: false, capacity: 2.0, headroom: 0.0, ledger: Ledger::default() };
        let c = vec![endpoint("a").build(), endpoint("b").build()];
        let now = tokio::time::Instant::now();
        assert_eq!(d.saturation(&c, now), 0.0);
        assert_eq!(d.saturation(&[], now), 1.0);
        let request = chat_request("m", &["hi"]);
        let data = RequestData::default();
        let cx = context_for(&request, &data);
        let on_a = SchedulingResult::new("p".into(), vec![("p".into(), ProfileResult { targets: vec![c[0].clone()] })]);
        d.pre_request(&cx, &on_a, &mut HeaderEdits::default());
        d.pre_request(&cx, &on_a, &mut HeaderEdits::default());
        assert_eq!(d.saturation(&c, now), 0.5);
        let kept: Vec<String> = d.filter(&cx, c.clone()).iter().map(|c| c.id().to_string()).collect();
        assert_eq!(kept, ["b"]);
        d.on_response_complete(&request, &on_a, None);
        assert_eq!(d.saturation(&c, now), 0.25);
        super::super::contract::check(&d);
    }

    #[test]
    fn mode_and_capacity_are_checked() {
        let spec =
            |v| PluginSpec { name: "c".into(), type_name: TYPE.into(), parameters: v, path: "plugins[0]".into() };
        assert_eq!(
            build(&spec(serde_json::json!({"concurrencyMode": "bytes"})), &BuildContext::default()).unwrap_err().path,
            "plugins[0].parameters.concurrencyMode"
        );
        assert_eq!(
            build(
                &spec(serde_json::json!({"concurrencyMode": "tokens", "maxTokenConcurrency": 0})),
                &BuildContext::default()
            )
            .unwrap_err()
            .path,
            "plugins[0].parameters.maxTokenConcurrency"
        );
    }
}
