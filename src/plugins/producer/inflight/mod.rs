//! `inflight-load-producer`: tracks the requests and tokens each endpoint is serving for this
//! EPP and produces `InFlightLoad` (per endpoint) and `UncachedRequestTokens` (what this
//! request would add to each candidate). The default producer of `DataKey::InFlightLoad`.
//!
//! `UncachedRequestTokens(e) = (totalBlocks - matchBlocks(e)) x blockSize +
//! max(0, inputTokens - totalBlocks x blockSize)`, or `inputTokens` without prefix data; plus, with
//! `addEstimatedOutputTokens`, `min(round(inputTokens x outputRatio), client max tokens,
//! maxEstimatedOutputTokens)`. Pre-request: for every profile result, its first target gets
//! `requests += 1`, `tokens += uncached`. Release: at the first response body chunk (prefill
//! is over) entries of non-primary profiles (prefill, encode) are released completely and,
//! when output estimation is off, the decode tokens too (the decode request stays counted);
//! everything at completion. Counters never go below 0.
//!
//! Parameters: `addEstimatedOutputTokens` (false), `outputRatio` (1.5, >= 0),
//! `maxEstimatedOutputTokens` (unset, >= 0), `prefixMatchInfoProducerName` ("" = default
//! prefix producer), `syncCrossReplicaState` (true: with replica sync on, share in-flight
//! load with the other replicas; false: this replica's load only).
//!
//! With replica sync (docs/replicas.md) every addition and release is published as a delta
//! and every heartbeat carries this replica's totals; `InFlightLoad` is the local ledger plus
//! what the other live replicas have in flight.
//!
//! Metrics: `llm_d_epp_inflight_requests` and `llm_d_epp_inflight_tokens`
//! `{endpoint_name, producer_name}`, set on every addition and release; an endpoint's series
//! is removed when both its counts drop to zero.

pub(crate) mod state;

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::{InFlightLoads, PrefixMatches, RequestData};
use crate::framework::plugin::{DataProducer, PluginInstance, PluginName, PreRequest, ResponseHook};
use crate::framework::replica::{Origin, RemoteLoads, ReplicaHandle, SharedState, SharedUpdate};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::request::InferenceRequest;
use crate::request::usage::Usage;
use state::{Gauges, Ledger, Released};

/// Type name.
pub const TYPE: &str = "inflight-load-producer";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Add an output-token estimate to the uncached tokens.
    pub add_estimated_output_tokens: bool,
    /// Output tokens per input token for the estimate.
    pub output_ratio: f64,
    /// Cap of the output estimate.
    pub max_estimated_output_tokens: Option<i64>,
    /// Prefix producer to read ("" = default).
    pub prefix_match_info_producer_name: String,
    /// Share in-flight load with the other replicas when replica sync is on.
    pub sync_cross_replica_state: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            add_estimated_output_tokens: false,
            output_ratio: 1.5,
            max_estimated_output_tokens: None,
            prefix_match_info_producer_name: String::new(),
            sync_cross_replica_state: true,
        }
    }
}

/// The producer and its ledger.
#[derive(Debug)]
pub struct InFlightProducer {
    name: PluginName,
    prefix_producer: Option<PluginName>,
    output: Option<(f64, Option<u64>)>,
    ledger: Ledger,
    replica: ReplicaHandle,
    remote: RemoteLoads,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    if !(p.output_ratio >= 0.0 && p.output_ratio.is_finite()) {
        return Err(BuildError::new(at("outputRatio"), "must be a finite number >= 0"));
    }
    let cap = p
        .max_estimated_output_tokens
        .map(u64::try_from)
        .transpose()
        .map_err(|_| BuildError::new(at("maxEstimatedOutputTokens"), "must be >= 0"))?;
    let producer = Arc::new(
        InFlightProducer::new(
            spec.name.clone(),
            Some(p.prefix_match_info_producer_name).filter(|s| !s.is_empty()).map(PluginName::from),
            p.add_estimated_output_tokens.then_some((p.output_ratio, cap)),
        )
        .with_gauges(cx.metrics.inflight_requests.clone(), cx.metrics.inflight_tokens.clone())
        .with_replica(if p.sync_cross_replica_state { cx.replica.clone() } else { ReplicaHandle::default() }),
    );
    producer.replica.register(&spec.name, &producer);
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_producer(producer.clone())
        .with_pre_request(producer.clone())
        .with_response(producer))
}

/// Tokens the request adds to an endpoint given its prefix match (reference formula).
pub fn uncached_tokens(input: u64, matches: Option<&PrefixMatches>, endpoint: &str) -> u64 {
    let Some(m) = matches.filter(|m| m.block_size_tokens > 0) else { return input };
    let block = m.block_size_tokens as u64;
    let total = m.total_blocks as u64;
    let matched = (m.get(endpoint).match_blocks as u64).min(total);
    (total - matched) * block + input.saturating_sub(total * block)
}

impl InFlightProducer {
    /// A producer with an empty ledger; `output` = (ratio, cap) when estimating output.
    pub fn new(name: PluginName, prefix_producer: Option<PluginName>, output: Option<(f64, Option<u64>)>) -> Self {
        Self {
            name,
            prefix_producer,
            output,
            ledger: Ledger::default(),
            replica: ReplicaHandle::default(),
            remote: RemoteLoads::default(),
        }
    }

    /// Shares this replica's in-flight load through `replica` (and counts the others').
    pub fn with_replica(mut self, replica: ReplicaHandle) -> Self {
        self.replica = replica;
        self
    }

    /// Mirrors the ledger into the `llm_d_epp_inflight_*` gauges (label `producer_name` = this
    /// producer's name). Call before any request is recorded.
    pub fn with_gauges(mut self, requests: prometheus::IntGaugeVec, tokens: prometheus::IntGaugeVec) -> Self {
        let producer = self.name.to_string();
        self.ledger = Ledger::with_gauges(Gauges { requests, tokens, producer });
        self
    }

    fn output_estimate(&self, request: &InferenceRequest, input: u64) -> u64 {
        let Some((ratio, cap)) = self.output else { return 0 };
        let mut estimate = (input as f64 * ratio).round() as u64;
        if let Some(client) = request.body.as_ref().and_then(|b| b.max_output_tokens) {
            estimate = estimate.min(client);
        }
        cap.map_or(estimate, |c| estimate.min(c))
    }

    /// Current (requests, tokens) of an endpoint: this replica's plus the other replicas'.
    pub fn load(&self, endpoint: &str) -> (u64, u64) {
        let (r, t) = self.ledger.load(endpoint);
        let (remote_r, remote_t) = self.remote.load(endpoint);
        (r.saturating_add(remote_r), t.saturating_add(remote_t))
    }

    fn publish_released(&self, released: Released) {
        for (endpoint, requests, tokens) in released {
            self.replica.publish(&self.name, || SharedUpdate::InFlightDelta {
                endpoint,
                requests: -i64::try_from(requests).unwrap_or(i64::MAX),
                tokens: -i64::try_from(tokens).unwrap_or(i64::MAX),
            });
        }
    }
}

impl DataProducer for InFlightProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::InFlightLoad(Some(self.name.clone()))]
    }

    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt, DataKey::PrefixCacheMatchInfo(self.prefix_producer.clone())]
    }

    fn produce(&self, request: &InferenceRequest, candidates: &[Candidate], data: &mut RequestData) {
        let input = data.tokens.as_ref().map_or(0, |t| t.len() as u64);
        let output = self.output_estimate(request, input);
        let matches = data.prefix.get(self.prefix_producer.as_deref()).cloned();
        let mut loads = InFlightLoads::default();
        for c in candidates {
            loads.uncached_tokens.insert(c.id().clone(), uncached_tokens(input, matches.as_deref(), c.id()) + output);
            loads.per_endpoint.insert(c.id().clone(), self.load(c.id()));
        }
        data.inflight.insert(self.name.clone(), Arc::new(loads));
    }
}

impl PreRequest for InFlightProducer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let loads = cx.data.inflight.get(Some(&self.name));
        let entries = result
            .profiles
            .iter()
            .filter_map(|(profile, r)| r.targets.first().map(|t| (profile, t)))
            .map(|(profile, t)| {
                let tokens = loads.and_then(|l| l.uncached_tokens.get(t.id()).copied()).unwrap_or(0);
                (t.id().clone(), tokens, *profile != result.primary_profile)
            })
            .collect::<Vec<_>>();
        if self.replica.is_enabled() {
            for (endpoint, tokens, _) in &entries {
                let (endpoint, tokens) = (endpoint.clone(), i64::try_from(*tokens).unwrap_or(i64::MAX));
                self.replica.publish(&self.name, || SharedUpdate::InFlightDelta { endpoint, requests: 1, tokens });
            }
        }
        self.ledger.add(&cx.request.request_id, entries);
    }
}

impl SharedState for InFlightProducer {
    fn apply(&self, origin: Origin<'_>, update: &SharedUpdate) {
        match update {
            SharedUpdate::InFlightDelta { endpoint, requests, tokens } => {
                self.remote.apply_delta(origin.replica, endpoint, *requests, *tokens);
            }
            SharedUpdate::InFlightTotals { loads } => self.remote.replace(origin.replica, loads),
            _ => {}
        }
    }

    fn heartbeat(&self) -> Vec<SharedUpdate> {
        vec![SharedUpdate::InFlightTotals { loads: self.ledger.totals() }]
    }

    fn forget_replica(&self, replica: &str) {
        self.remote.forget(replica);
    }
}

impl ResponseHook for InFlightProducer {
    fn on_first_response_chunk(&self, request: &InferenceRequest, _: &SchedulingResult) {
        // Without an output estimate the decode tokens were all prompt tokens: prefill is done.
        self.publish_released(self.ledger.release_first_chunk(&request.request_id, self.output.is_none()));
    }

    fn on_response_complete(&self, request: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {
        self.publish_released(self.ledger.release(&request.request_id));
    }
}

#[cfg(test)]
mod tests;
