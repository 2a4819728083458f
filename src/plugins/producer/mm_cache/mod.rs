//! `mm-embeddings-cache-producer`: produces `EncoderCacheMatchInfo`, the likelihood that a
//! candidate already holds the request's multimodal items (images, audio, video) in its
//! encoder cache, so `mm-embeddings-cache-scorer` can send repeated media to the same pod.
//!
//! * Items (`items`): the multimodal items the tokenize step reported (`token-producer` with
//!   the `vllm` backend: render `features.mm_hashes`, weighted by placeholder length), else
//!   the chat media parts (hash of the URL or inline data, weight 1). Repeats count once.
//! * Produce: per candidate, the weight of the request's items found in that endpoint's
//!   cache model (`pod_cache`), plus the item list for the pre-request step.
//! * Pre-request: the items are pinned in the model of every target of the `encode` profile
//!   when it ran (E/PD: the encoder pod holds the embeddings), else of the primary profile.
//!   An item that does not fit without evicting a pinned one is pending.
//! * Response: at the first response chunk the pins are released (entries become the newest
//!   reclaimable ones) and pending items are recorded; a request that ends before any chunk
//!   releases its pins and records nothing. Placements not completed after 10 minutes are
//!   released (checked at most once a minute, when a request is placed).
//! * Endpoints that leave the pool lose their model (checked at each request).
//!
//! Parameters (mutually exclusive): `cacheSizeInEmbeddingsPerServer` (capacity per endpoint
//! in encoder embeddings; items use their reported size), `cacheSizeInMBPerServer` (default
//! 4096; compatibility mode: `MiB / 2` items of one unit each). Values <= 0 mean unset.
//! Metrics: `llm_d_epp_encoder_cache_queries_total`, `…_hits_total`, `…_hit_ratio`.
//! `encoder_cache_sizes` gives a bound `predicted-latency-producer` the same match (total and
//! matched weight per candidate) before its prediction call, without recording metrics.

pub mod items;
pub mod pod_cache;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntCounterVec};
use serde::Deserialize;
use tokio::time::Instant;

use crate::endpoints::model::{Candidate, EndpointId};
use crate::endpoints::store::EndpointStore;
use crate::framework::build::{BuildContext, BuildError, PluginMetrics, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::{EncoderCacheMatches, RequestData};
use crate::framework::plugin::{DataProducer, EncoderCacheSizer, PluginInstance, PluginName, PreRequest, ResponseHook};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::latency::EncoderCacheSizes;
use crate::latency::features::EncoderSizes;
use crate::request::InferenceRequest;
use crate::request::multimodal::{MediaItem, Modality};
use crate::request::usage::Usage;
use pod_cache::PodCache;

/// Type name.
pub const TYPE: &str = "mm-embeddings-cache-producer";
/// Profile whose targets compute the embeddings in E/PD disaggregation (the
/// `disagg-profile-handler` default; llm-d hard-codes it too).
pub const ENCODE_PROFILE: &str = "encode";
/// Default `cacheSizeInMBPerServer` (4 GiB).
pub const DEFAULT_CACHE_MIB: u64 = 4096;
/// Assumed MiB per item in the compatibility mode.
const MIB_PER_ITEM: u64 = 2;
/// Placements whose request never reached its first response chunk are released after this.
const PLACEMENT_TTL: Duration = Duration::from_secs(600);
const MODALITIES: [Modality; 4] = [Modality::Image, Modality::Video, Modality::Audio, Modality::Other];

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Compatibility sizing: MiB of encoder cache per endpoint (2 MiB per item).
    #[serde(rename = "cacheSizeInMBPerServer")]
    pub cache_size_in_mb_per_server: i64,
    /// Encoder cache capacity per endpoint in embeddings.
    #[serde(rename = "cacheSizeInEmbeddingsPerServer")]
    pub cache_size_in_embeddings_per_server: i64,
}

/// One target's share of a routed request.
#[derive(Debug)]
struct PodPlacement {
    pod: EndpointId,
    /// Items pinned for the request.
    acquired: Vec<u128>,
    /// Items that did not fit; recorded when the response starts.
    pending: Vec<(u128, u64)>,
}

#[derive(Debug)]
struct Placement {
    at: Instant,
    pods: Vec<PodPlacement>,
}

#[derive(Debug, Default)]
struct Placements {
    /// By request id. A client reusing an `x-request-id` for concurrent requests replaces
    /// the earlier placement (its pins are released early, which only weakens its eviction
    /// protection).
    by_request: HashMap<String, Placement>,
    last_sweep: Option<Instant>,
}

/// Per-plugin metric handles.
#[derive(Debug)]
struct Handles {
    queries: [IntCounter; 4],
    hits: IntCounterVec,
    hit_ratio: Histogram,
}

/// The producer and its per-endpoint cache models.
#[derive(Debug)]
pub struct MmCacheProducer {
    name: PluginName,
    /// Capacity of each endpoint's model, in units.
    capacity: u64,
    /// Items take their reported size (embeddings mode) rather than one unit.
    sized: bool,
    caches: RwLock<HashMap<EndpointId, PodCache>>,
    placements: Mutex<Placements>,
    endpoints: EndpointStore,
    seen_generation: AtomicU64,
    metrics: Handles,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let (mib, embeddings) = (p.cache_size_in_mb_per_server, p.cache_size_in_embeddings_per_server);
    if mib > 0 && embeddings > 0 {
        return Err(BuildError::new(
            format!("{}.parameters", spec.path),
            "cacheSizeInMBPerServer and cacheSizeInEmbeddingsPerServer cannot both be set",
        ));
    }
    let (capacity, sized) = match u64::try_from(embeddings) {
        Ok(n) if n > 0 => (n, true),
        _ => (u64::try_from(mib).ok().filter(|m| *m > 0).unwrap_or(DEFAULT_CACHE_MIB) / MIB_PER_ITEM, false),
    };
    let producer =
        Arc::new(MmCacheProducer::new(spec.name.clone(), capacity, sized, cx.endpoints.clone(), &cx.metrics));
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_producer(producer.clone())
        .with_encoder_cache_sizer(producer.clone())
        .with_pre_request(producer.clone())
        .with_response(producer))
}

impl MmCacheProducer {
    /// A producer with empty models of `capacity` units per endpoint; `sized` = items count
    /// their reported size (embeddings mode), else one unit each.
    pub fn new(name: PluginName, capacity: u64, sized: bool, endpoints: EndpointStore, m: &PluginMetrics) -> Self {
        let queries = MODALITIES.map(|md| m.encoder_cache_queries.with_label_values(&[TYPE, &*name, md.as_str()]));
        let metrics = Handles {
            queries,
            hits: m.encoder_cache_hits.clone(),
            hit_ratio: m.encoder_cache_hit_ratio.with_label_values(&[TYPE, &*name]),
        };
        Self {
            name,
            capacity: capacity.max(1),
            sized,
            caches: RwLock::new(HashMap::new()),
            placements: Mutex::new(Placements::default()),
            endpoints,
            seen_generation: AtomicU64::new(0),
            metrics,
        }
    }

    /// Items tracked for an endpoint (tests, debugging).
    pub fn tracked(&self, pod: &str) -> usize {
        self.caches.read().unwrap_or_else(|e| e.into_inner()).get(pod).map_or(0, PodCache::len)
    }

    /// Requests whose placement is still open (pinned, waiting for the response).
    pub fn open_placements(&self) -> usize {
        self.placements.lock().unwrap_or_else(|e| e.into_inner()).by_request.len()
    }

    fn unit(&self, item: &MediaItem) -> u64 {
        if self.sized { u64::from(item.size.max(1)) } else { 1 }
    }

    /// Drops the models of endpoints that left the pool (once per endpoint-set change).
    fn prune_departed(&self) {
        let generation = self.endpoints.generation();
        if self.seen_generation.swap(generation, Ordering::Relaxed) == generation {
            return;
        }
        let set = self.endpoints.snapshot();
        let mut removed = Vec::new();
        self.caches.write().unwrap_or_else(|e| e.into_inner()).retain(|id, _| {
            let keep = set.get(id).is_some();
            if !keep {
                removed.push(id.clone());
            }
            keep
        });
        for pod in removed {
            tracing::debug!(plugin = %self.name, pod = %pod, "Dropped the encoder-cache model of a departed endpoint");
            for md in MODALITIES {
                let _ = self.metrics.hits.remove_label_values(&[TYPE, &self.name, &pod, md.as_str()]);
            }
        }
    }

    /// Matched weight per candidate, recording the lookup metrics.
    fn lookup(&self, items: &[MediaItem], candidates: &[Candidate]) -> HashMap<EndpointId, u64> {
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        for item in items {
            self.metrics.queries[modality_index(item.modality)].inc();
            for (pod, _) in caches.iter().filter(|(_, c)| c.contains(item.key)) {
                self.metrics.hits.with_label_values(&[TYPE, &self.name, pod, item.modality.as_str()]).inc();
            }
        }
        let mut out = HashMap::new();
        for c in candidates {
            let held: Vec<&MediaItem> = match caches.get(c.id()) {
                Some(cache) => items.iter().filter(|i| cache.contains(i.key)).collect(),
                None => Vec::new(),
            };
            self.metrics.hit_ratio.observe(held.len() as f64 / items.len() as f64);
            let weight: u64 = held.iter().map(|i| u64::from(i.size.max(1))).sum();
            if weight > 0 {
                out.insert(c.id().clone(), weight);
            }
        }
        out
    }

    /// Pins `items` on each target; returns what was pinned or left pending.
    fn acquire(&self, targets: &[Candidate], items: &[MediaItem]) -> Vec<PodPlacement> {
        let mut caches = self.caches.write().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            if out.iter().any(|p: &PodPlacement| p.pod == *t.id()) {
                continue;
            }
            let cache = caches.entry(t.id().clone()).or_insert_with(|| PodCache::new(self.capacity));
            let mut placement = PodPlacement { pod: t.id().clone(), acquired: Vec::new(), pending: Vec::new() };
            for item in items {
                let size = self.unit(item);
                if cache.acquire(item.key, size) {
                    placement.acquired.push(item.key);
                } else {
                    placement.pending.push((item.key, size));
                }
            }
            out.push(placement);
        }
        out
    }

    /// Releases the pins of `placement`; with `commit`, records its pending items too.
    fn finish(&self, placement: Placement, commit: bool) {
        let mut caches = self.caches.write().unwrap_or_else(|e| e.into_inner());
        for p in placement.pods {
            // The endpoint may have left meanwhile; nothing to release then.
            let Some(cache) = caches.get_mut(&p.pod) else { continue };
            for key in p.acquired {
                cache.release(key);
            }
            if commit {
                for (key, size) in p.pending {
                    cache.commit(key, size);
                }
            }
        }
    }

    /// Completes the open placement of `request_id`, if any.
    fn complete(&self, request_id: &str, commit: bool) {
        let taken = self.placements.lock().unwrap_or_else(|e| e.into_inner()).by_request.remove(request_id);
        if let Some(p) = taken {
            self.finish(p, commit);
        }
    }

    /// Records a new placement, releasing placements older than the TTL (at most once a
    /// minute).
    fn open(&self, request_id: &str, placement: Placement) {
        let now = placement.at;
        let mut expired = Vec::new();
        {
            let mut open = self.placements.lock().unwrap_or_else(|e| e.into_inner());
            expired.extend(open.by_request.insert(request_id.to_string(), placement));
            let due = open.last_sweep.is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(60));
            if due {
                open.last_sweep = Some(now);
                expired.extend(sweep(&mut open.by_request, now));
            }
        }
        if !expired.is_empty() {
            tracing::debug!(plugin = %self.name, n = expired.len(), "Released encoder-cache pins early");
        }
        for p in expired {
            self.finish(p, false);
        }
    }
}

/// Removes and returns the placements older than the TTL.
fn sweep(by_request: &mut HashMap<String, Placement>, now: Instant) -> Vec<Placement> {
    let stale: Vec<String> = by_request
        .iter()
        .filter(|(_, p)| now.saturating_duration_since(p.at) >= PLACEMENT_TTL)
        .map(|(id, _)| id.clone())
        .collect();
    stale.iter().filter_map(|id| by_request.remove(id)).collect()
}

fn modality_index(m: Modality) -> usize {
    MODALITIES.iter().position(|x| *x == m).unwrap_or(MODALITIES.len() - 1)
}

impl DataProducer for MmCacheProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::EncoderCacheMatchInfo(Some(self.name.clone()))]
    }

    fn produce(&self, request: &InferenceRequest, candidates: &[Candidate], data: &mut RequestData) {
        self.prune_departed();
        let items = items::request_items(request, data.mm_items.as_deref());
        if items.is_empty() {
            return;
        }
        let total_weight = items.iter().map(|i| u64::from(i.size.max(1))).sum();
        let per_endpoint = self.lookup(&items, candidates);
        let matches = EncoderCacheMatches { items: items.into(), total_weight, per_endpoint };
        data.encoder_cache.insert(self.name.clone(), Arc::new(matches));
    }
}

impl EncoderCacheSizer for MmCacheProducer {
    fn encoder_cache_sizes(
        &self,
        request: &InferenceRequest,
        data: &RequestData,
        candidates: &[Candidate],
    ) -> EncoderCacheSizes {
        let items = items::request_items(request, data.mm_items.as_deref());
        let weight = |i: &MediaItem| u64::from(i.size.max(1));
        let input = items.iter().map(weight).sum();
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        let per_endpoint = candidates
            .iter()
            .filter_map(|c| {
                let cache = caches.get(c.id())?;
                let matched = items.iter().filter(|i| cache.contains(i.key)).map(weight).sum();
                (matched > 0).then(|| (c.id().clone(), EncoderSizes { input, matched }))
            })
            .collect();
        EncoderCacheSizes { input, per_endpoint }
    }
}

impl PreRequest for MmCacheProducer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let Some(m) = cx.data.encoder_cache.get(Some(&self.name)) else { return };
        if m.items.is_empty() {
            return;
        }
        let targets = match result.profile(ENCODE_PROFILE).or_else(|| result.primary()) {
            Some(r) if !r.targets.is_empty() => &r.targets,
            _ => return,
        };
        let pods = self.acquire(targets, &m.items);
        self.open(&cx.request.request_id, Placement { at: cx.now, pods });
    }
}

impl ResponseHook for MmCacheProducer {
    fn on_first_response_chunk(&self, request: &InferenceRequest, _: &SchedulingResult) {
        // Prefill (and so encoding) finished: the embeddings exist on the pod.
        self.complete(&request.request_id, true);
    }

    fn on_response_complete(&self, request: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {
        // Ended before any response chunk (error, abort): nothing was computed for sure.
        self.complete(&request.request_id, false);
    }
}

#[cfg(test)]
mod tests;
