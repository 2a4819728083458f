//! `approx-prefix-cache-producer`: produces `PrefixCacheMatchInfo` from routing history. The
//! prompt's tokens (`TokenizedPrompt`) are cut into blocks and chained into keys
//! (`hashing`); each candidate's match is the number of leading keys recorded for it in the
//! `index`. After the decision (pre-request) the keys are recorded on the primary target and
//! on the target of a profile named `prefill`.
//!
//! Parameters (llm-d defaults): `autoTune` (true: block size from the endpoint's
//! `cache_config_info` and LRU capacity from its `num_gpu_blocks`), `blockSizeTokens` (16,
//! raised to at least 64 at request time), `blockSize` (deprecated alias),
//! `maxPrefixTokensToMatch` (131072; takes precedence), `maxPrefixBlocksToMatch` (2048; used
//! only when tokens = 0; both 0 = unlimited), `lruCapacityPerServer` (31250).
//!
//! With replica sync (docs/replicas.md) every recorded entry is published, and entries other
//! replicas recorded are added to the index the same way (endpoints this replica does not
//! know are skipped).

pub mod hashing;
pub mod index;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use super::prefix_source::PrefixSource;
use crate::endpoints::model::{Candidate, MetricsState};
use crate::endpoints::store::EndpointStore;
use crate::framework::build::{BuildContext, BuildError, PluginMetrics, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::data::{EndpointMatches, MatchInfo};
use crate::framework::plugin::{PluginInstance, PluginName, PreRequest};
use crate::framework::replica::{Origin, Remote, ReplicaHandle, SharedState, SharedUpdate};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::request::InferenceRequest;
use crate::telemetry::twin::{TwinGauge, TwinHistogram};
use index::ApproxIndex;

/// Type name.
pub const TYPE: &str = "approx-prefix-cache-producer";
/// Smallest block size used at request time (llm-d #1160).
pub const MIN_BLOCK_SIZE_TOKENS: usize = 64;

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Tune block size and capacity from endpoint metrics.
    pub auto_tune: bool,
    /// Block size in tokens.
    pub block_size_tokens: usize,
    /// Deprecated alias of `blockSizeTokens`.
    pub block_size: Option<usize>,
    /// Token limit of the match (0 = use blocks).
    pub max_prefix_tokens_to_match: usize,
    /// Block limit when the token limit is 0 (0 = unlimited).
    pub max_prefix_blocks_to_match: usize,
    /// Per-endpoint LRU capacity in blocks.
    pub lru_capacity_per_server: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            auto_tune: true,
            block_size_tokens: 16,
            block_size: None,
            max_prefix_tokens_to_match: 131_072,
            max_prefix_blocks_to_match: 2048,
            lru_capacity_per_server: 31_250,
        }
    }
}

/// The producer and its index.
#[derive(Debug)]
pub struct ApproxPrefixProducer {
    name: PluginName,
    params: Params,
    index: ApproxIndex,
    endpoints: EndpointStore,
    seen_generation: AtomicU64,
    hit_ratio: TwinHistogram,
    hit_bytes: TwinHistogram,
    size: TwinGauge,
    replica: ReplicaHandle,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let mut params: Params = decode_params(spec)?;
    if let Some(old) = params.block_size.take() {
        tracing::warn!(plugin = %spec.name, "parameter blockSize is deprecated; use blockSizeTokens");
        params.block_size_tokens = old;
    }
    if params.block_size_tokens == 0 {
        return Err(BuildError::new(format!("{}.parameters.blockSizeTokens", spec.path), "must be > 0"));
    }
    if params.lru_capacity_per_server == 0 {
        return Err(BuildError::new(format!("{}.parameters.lruCapacityPerServer", spec.path), "must be > 0"));
    }
    let producer = Arc::new(
        ApproxPrefixProducer::new(spec.name.clone(), params, cx.endpoints.clone(), &cx.metrics)
            .with_replica(cx.replica.clone()),
    );
    cx.replica.register(&spec.name, &producer);
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_producer(producer.clone()).with_pre_request(producer))
}

impl ApproxPrefixProducer {
    /// A producer with an empty index.
    pub fn new(name: PluginName, params: Params, endpoints: EndpointStore, metrics: &PluginMetrics) -> Self {
        let labels = [&*name, TYPE];
        Self {
            hit_ratio: metrics.prefix_hit_ratio.with(&labels),
            hit_bytes: metrics.prefix_hit_bytes.with(&labels),
            size: metrics.prefix_indexer_size.with(&labels),
            name,
            params,
            index: ApproxIndex::default(),
            endpoints,
            seen_generation: AtomicU64::new(0),
            replica: ReplicaHandle::default(),
        }
    }

    /// Publishes recorded entries to the other replicas through `replica`.
    pub fn with_replica(mut self, replica: ReplicaHandle) -> Self {
        self.replica = replica;
        self
    }

    fn block_size(&self, candidates: &[Candidate]) -> usize {
        let tuned = self
            .params
            .auto_tune
            .then(|| candidates.first().and_then(|c| c.metrics.metrics.cache_block_size))
            .flatten()
            .map(|b| b as usize)
            .filter(|b| *b > 0);
        tuned.unwrap_or(self.params.block_size_tokens).max(MIN_BLOCK_SIZE_TOKENS)
    }

    fn max_blocks(&self, block_size: usize) -> usize {
        if self.params.max_prefix_tokens_to_match > 0 {
            (self.params.max_prefix_tokens_to_match / block_size).max(1)
        } else {
            self.params.max_prefix_blocks_to_match
        }
    }

    fn capacity(&self, c: &Candidate) -> usize {
        self.capacity_of(&c.metrics)
    }

    fn capacity_of(&self, metrics: &MetricsState) -> usize {
        let tuned = self.params.auto_tune.then_some(metrics.metrics.cache_num_blocks).flatten().filter(|n| *n > 0);
        tuned.map_or(self.params.lru_capacity_per_server, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn prune_departed(&self) {
        let generation = self.endpoints.generation();
        if self.seen_generation.swap(generation, Ordering::Relaxed) != generation {
            let set = self.endpoints.snapshot();
            self.index.retain(|id| set.get(id).is_some());
        }
    }
}

impl PrefixSource for ApproxPrefixProducer {
    fn source_name(&self) -> &PluginName {
        &self.name
    }

    fn prompt_keys(&self, request: &InferenceRequest, tokens: &[u32], candidates: &[Candidate]) -> (usize, Vec<u64>) {
        let block_size = self.block_size(candidates);
        let salt = request.body.as_ref().and_then(|b| b.cache_salt.as_deref());
        (block_size, hashing::block_keys(&request.target_model, salt, tokens, block_size, self.max_blocks(block_size)))
    }

    fn lookup(&self, keys: &[u64], _: &[Candidate]) -> EndpointMatches {
        let counts = self.index.match_counts(keys);
        counts.into_iter().map(|(id, n)| (id, MatchInfo { match_blocks: n, weighted_blocks: n as f64 })).collect()
    }
}

impl PreRequest for ApproxPrefixProducer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        self.prune_departed();
        let Some(m) = cx.data.prefix.get(Some(&self.name)) else { return };
        if m.keys.is_empty() {
            return;
        }
        let mut holders = result.cache_holders();
        if let Some(primary) = holders.next() {
            let info = m.get(&primary.endpoint.id);
            self.hit_ratio.observe(info.match_blocks as f64 / m.total_blocks as f64);
            self.hit_bytes.observe((info.match_blocks * m.block_size_tokens * 4) as f64);
            self.record(primary, &m.keys);
        }
        for other in holders {
            self.record(other, &m.keys);
        }
        self.size.set(self.index.len() as f64);
    }
}

impl ApproxPrefixProducer {
    fn record(&self, holder: &Candidate, keys: &Arc<[u64]>) {
        self.index.add(holder.id(), keys, self.capacity(holder));
        let endpoint = holder.id().clone();
        self.replica.publish(&self.name, || SharedUpdate::PrefixRecorded { endpoint, keys: keys.clone() });
    }
}

impl SharedState for ApproxPrefixProducer {
    fn apply(&self, origin: Origin<'_>, update: &SharedUpdate) {
        self.apply_batch(&[Remote { origin, update }]);
    }

    /// One endpoint snapshot and one size update for the run; the index locks per update, as
    /// a decision's own record does, so a decision never waits behind a whole run.
    fn apply_batch(&self, updates: &[Remote<'_>]) {
        let endpoints = self.endpoints.snapshot();
        for remote in updates {
            let SharedUpdate::PrefixRecorded { endpoint, keys } = remote.update else { continue };
            let Some(entry) = endpoints.get(endpoint) else { continue };
            self.index.add(endpoint, keys, self.capacity_of(&entry.metrics.load()));
        }
        self.size.set(self.index.len() as f64);
    }
}
