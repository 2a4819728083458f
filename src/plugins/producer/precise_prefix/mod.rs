//! `precise-prefix-cache-producer`: produces `PrefixCacheMatchInfo` from what the engines
//! report. A background service subscribes to vLLM's ZeroMQ KV events (central or
//! pod-discovery mode, following the endpoint store) and applies them to a sharded
//! `kvcache::PrefixIndex`; per request the prompt's tokens (`TokenizedPrompt`) become block
//! keys (epp's request keys, or vLLM's own hashes when `hashAlgorithm` names a vLLM
//! algorithm) and one index lookup gives every endpoint's longest cached prefix, weighted by
//! tier (gpu 1.0, cpu 0.8). Endpoints leaving the store are purged from the index.
//! With `speculativeIndexing`, PreRequest adds the routed prompt's keys to the chosen
//! endpoint (and the prefill pick) until `speculativeTTL` (`kvcache::speculative`); with
//! replica sync (docs/replicas.md) they are published, and other replicas' speculative
//! entries are added here for the local TTL (skipped when already expired).
//!
//! With `kvBlockIndexConfig.redisConfig` the index is `kvcache::RedisIndex` (llm-d's key
//! layout, shared by replicas and llm-d EPPs): events are written there, and the lookup runs
//! as a `PrefixPrefetch` the stage awaits before the decision (bounded by `lookupTimeout`;
//! no answer = no prefix scores). The in-process index then stays empty and is not offered
//! in `cx.indexes`.
//!
//! Parameters: see `params` (llm-d's schema: `tokenProcessorConfig`, `indexerConfig`,
//! `kvCacheBackendConfigs`, `kvEventsConfig`, `speculativeIndexing`, `speculativeTTL`).

pub mod params;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use std::time::Instant;

use tokio::sync::watch;

use super::prefix_source::PrefixSource;
use crate::endpoints::model::Candidate;
use crate::endpoints::store::EndpointStore;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::data::{EndpointMatches, MatchInfo, PrefixMatches};
use crate::framework::plugin::{
    BackgroundService, PluginInstance, PluginName, PreRequest, PrefixPrefetch, ServiceContext, ServiceFuture,
    ServiceStartError,
};
use crate::framework::replica::{Origin, ReplicaHandle, SharedState, SharedUpdate};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::kvcache::hashing::HashExtras;
use crate::kvcache::index::KeyMode;
use crate::kvcache::{
    DriftDetector, IndexSink, KvCacheMetrics, KvEventSource, PrefixIndex, RedisIndex, SpeculativeLedger, Subscriber,
    SubscriberConfig, SubscriberHandle,
};
use crate::request::InferenceRequest;
use params::{Derived, Params};

/// Type name.
pub const TYPE: &str = "precise-prefix-cache-producer";

/// The producer, its index and its subscription.
#[derive(Debug)]
pub struct PrecisePrefixProducer {
    name: PluginName,
    index: Arc<PrefixIndex>,
    metrics: Arc<KvCacheMetrics>,
    derived: Derived,
    subscriber: Mutex<Option<Arc<SubscriberHandle>>>,
    speculative: Option<Arc<SpeculativeLedger>>,
    replica: ReplicaHandle,
    /// The shared index, when `redisConfig` selects it.
    shared: Option<Arc<RedisIndex>>,
}

/// Builds the producer from already decoded parameters (shared with the scorer shim) and
/// offers its index in `cx.indexes`.
pub fn build_producer(
    spec: &PluginSpec,
    params: &Params,
    cx: &BuildContext,
) -> Result<Arc<PrecisePrefixProducer>, BuildError> {
    let derived = params
        .derive()
        .map_err(|(path, message)| BuildError::new(format!("{}.parameters.{path}", spec.path), message))?;
    let index = Arc::new(PrefixIndex::new(derived.index.clone()));
    let shared = match &derived.redis {
        Some(config) => Some(Arc::new(RedisIndex::try_new(config.clone(), cx.metrics.kv.clone()).map_err(|e| {
            BuildError::new(
                format!("{}.parameters.indexerConfig.kvBlockIndexConfig.redisConfig.address", spec.path),
                e.to_string(),
            )
        })?)),
        None => {
            cx.indexes.register(spec.name.clone(), index.clone());
            cx.metrics.kv.indexes.track(&index);
            None
        }
    };
    Ok(Arc::new(PrecisePrefixProducer {
        shared,
        name: spec.name.clone(),
        index,
        metrics: cx.metrics.kv.clone(),
        speculative: derived.speculative.map(|ttl| Arc::new(SpeculativeLedger::new(ttl))),
        derived,
        subscriber: Mutex::new(None),
        replica: cx.replica.clone(),
    }))
}

/// The plugin instance of a built producer: data producer, background subscriber and, with
/// `speculativeIndexing`, the PreRequest hook that records speculative entries.
pub fn producer_instance(
    spec: &PluginSpec,
    type_name: &'static str,
    producer: Arc<PrecisePrefixProducer>,
) -> PluginInstance {
    let instance = PluginInstance::new(spec.name.clone(), type_name).with_producer(producer.clone());
    let instance = match producer.shared {
        Some(_) => instance.with_prefix_prefetch(producer.clone()),
        None => instance,
    };
    let instance = match producer.speculative {
        Some(_) => {
            producer.replica.register(&spec.name, &producer);
            instance.with_pre_request(producer.clone())
        }
        None => instance,
    };
    instance.with_background(producer)
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: Params = decode_params(spec)?;
    if params.indexer_config.tokenizers_pool_config.is_some() {
        return Err(BuildError::new(
            format!("{}.parameters.indexerConfig.tokenizersPoolConfig", spec.path),
            "not accepted here: configure a token-producer for real token ids",
        ));
    }
    let producer = build_producer(spec, &params, cx)?;
    Ok(producer_instance(spec, TYPE, producer))
}

impl PrecisePrefixProducer {
    /// The index (read-only use: lookups, sizes).
    pub fn index(&self) -> &Arc<PrefixIndex> {
        &self.index
    }

    fn keys(&self, request: &InferenceRequest, tokens: &[u32]) -> Vec<u64> {
        let model = request.target_model.as_str();
        let salt = request.body.as_ref().and_then(|b| b.cache_salt.as_deref());
        match (&self.derived.index.key_mode, &self.derived.engine_hasher) {
            (KeyMode::Request { keyer, block_size }, _) => keyer.prompt_keys(model, salt, tokens, *block_size),
            (KeyMode::Engine { block_size, .. }, Some(hasher)) => {
                hasher.block_hashes_u64(tokens, *block_size, &HashExtras { lora: None, cache_salt: salt })
            }
            (KeyMode::Engine { .. }, None) => Vec::new(),
        }
    }
}

impl PreRequest for PrecisePrefixProducer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let Some(ledger) = &self.speculative else { return };
        let Some(m) = cx.data.prefix.get(Some(&self.name)) else { return };
        let now = Instant::now();
        for holder in result.cache_holders() {
            self.metrics.record_speculative(ledger.record(&self.index, &holder.endpoint.id, &m.keys, now));
            let endpoint = holder.endpoint.id.clone();
            self.replica.publish(&self.name, || SharedUpdate::Speculative { endpoint, keys: m.keys.clone() });
        }
    }
}

impl SharedState for PrecisePrefixProducer {
    fn apply(&self, origin: Origin<'_>, update: &SharedUpdate) {
        let (Some(ledger), SharedUpdate::Speculative { endpoint, keys }) = (&self.speculative, update) else { return };
        // Already expired at its publisher: nothing to add. Otherwise it lives one TTL from
        // now (late by the sync lag), which keeps the ledger in deadline order.
        if origin.age < ledger.ttl() {
            self.metrics.record_speculative(ledger.record(&self.index, endpoint, keys, Instant::now()));
        }
    }
}

/// Expires speculative entries while no request arrives to do it.
async fn expire_speculation(
    ledger: Arc<SpeculativeLedger>,
    index: Arc<PrefixIndex>,
    metrics: Arc<KvCacheMetrics>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let period = (ledger.ttl() / 4).max(std::time::Duration::from_millis(10));
    let mut ticks = crate::periodic::Periodic::new(period);
    while ticks.tick(&cancel).await {
        metrics.record_speculative(ledger.expire(&index, Instant::now()));
    }
}

impl PrefixPrefetch for PrecisePrefixProducer {
    fn producer(&self) -> &PluginName {
        &self.name
    }

    fn prefetch<'a>(&'a self, request: &'a InferenceRequest, tokens: &'a [u32]) -> ServiceFuture<'a, PrefixMatches> {
        Box::pin(async move {
            let keys = self.keys(request, tokens);
            let found = match &self.shared {
                Some(shared) => shared.lookup(&keys).await.unwrap_or_else(|e| {
                    tracing::debug!(error = %e, "No shared prefix scores for this request");
                    Vec::new()
                }),
                None => self.metrics.timed_lookup(&self.index, &keys),
            };
            let per_endpoint = found
                .into_iter()
                .map(|m| (m.endpoint, MatchInfo { match_blocks: m.blocks, weighted_blocks: m.weighted }))
                .collect();
            PrefixMatches {
                block_size_tokens: self.derived.block_size,
                total_blocks: keys.len(),
                keys: keys.into(),
                per_endpoint,
            }
        })
    }
}

impl PrefixSource for PrecisePrefixProducer {
    fn source_name(&self) -> &PluginName {
        &self.name
    }

    fn prompt_keys(&self, request: &InferenceRequest, tokens: &[u32], _: &[Candidate]) -> (usize, Vec<u64>) {
        (self.derived.block_size, self.keys(request, tokens))
    }

    fn lookup(&self, keys: &[u64], candidates: &[Candidate]) -> EndpointMatches {
        let wanted: HashSet<&str> = candidates.iter().map(|c| &*c.endpoint.id).collect();
        self.metrics
            .timed_lookup(&self.index, keys)
            .into_iter()
            .filter(|m| wanted.contains(&*m.endpoint))
            .map(|m| (m.endpoint, MatchInfo { match_blocks: m.blocks, weighted_blocks: m.weighted }))
            .collect()
    }
}

/// The endpoint list as KV-event sources.
fn sources(store: &EndpointStore) -> Vec<KvEventSource> {
    store
        .snapshot()
        .entries
        .iter()
        .map(|e| KvEventSource {
            name: e.endpoint.id.clone(),
            address: e.endpoint.address,
            port: e.endpoint.port,
            rank: e.endpoint.rank,
            kv_events_endpoint: e.endpoint.kv_events_endpoint.clone(),
        })
        .collect()
}

/// Follows the store: publishes sources to the subscriber and purges departed endpoints.
async fn follow_endpoints(
    store: EndpointStore,
    tx: watch::Sender<Vec<KvEventSource>>,
    index: IndexSink,
    metrics: Arc<KvCacheMetrics>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut changes = store.subscribe();
    let mut known: HashSet<Arc<str>> = tx.borrow().iter().map(|s| s.name.clone()).collect();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let now = sources(&store);
        let names: HashSet<Arc<str>> = now.iter().map(|s| s.name.clone()).collect();
        for gone in known.difference(&names) {
            index.remove_endpoint(gone).await;
            metrics.forget_endpoint(gone);
            tracing::info!(endpoint = %gone, "Endpoint left: its KV cache entries were purged");
        }
        // After the purge: the shared index finds departed endpoints by their old address.
        index.set_sources(&now);
        known = names;
        if tx.send(now).is_err() {
            return;
        }
    }
}

impl BackgroundService for PrecisePrefixProducer {
    fn start(&self, cx: ServiceContext) -> ServiceFuture<'_, Result<(), ServiceStartError>> {
        Box::pin(async move {
            let (tx, rx) = watch::channel(sources(&cx.endpoints));
            let drift = match &self.derived.drift {
                Some(d) => Some(Arc::new(
                    DriftDetector::try_new(d.clone())
                        .map_err(|e| ServiceStartError::new(&self.name, "drift detection: ", e))?,
                )),
                None => None,
            };
            let config: SubscriberConfig = self.derived.subscriber.clone();
            let sink = match &self.shared {
                Some(shared) => {
                    if let Err(e) = shared.connect().await {
                        tracing::warn!(error = %e, "Redis index not reachable at start; retrying on use");
                    }
                    IndexSink::from(shared.clone())
                }
                None => IndexSink::from(self.index.clone()),
            };
            sink.set_sources(&rx.borrow());
            let handle = Subscriber::spawn(config, sink.clone(), self.metrics.clone(), drift, rx, cx.cancel.clone())
                .await
                .map_err(|e| ServiceStartError::new(&self.name, "", e))?;
            tokio::spawn(follow_endpoints(cx.endpoints.clone(), tx, sink, self.metrics.clone(), cx.cancel.clone()));
            if let Some(ledger) = &self.speculative {
                let (index, metrics) = (self.index.clone(), self.metrics.clone());
                tokio::spawn(expire_speculation(ledger.clone(), index, metrics, cx.cancel.clone()));
            }
            *self.subscriber.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(handle));
            Ok(())
        })
    }

    fn flush(&self) -> ServiceFuture<'_, ()> {
        let handle = self.subscriber.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move {
            if let Some(h) = handle {
                h.flush().await;
            }
        })
    }
}
