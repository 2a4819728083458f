//! The prefix index kept in Redis (or Valkey) in llm-d's key layout, so that several epp
//! replicas — and llm-d EPPs — share one index fed by whichever replica receives an
//! endpoint's KV events (central-bind mode). Selected by the precise producer's
//! `kvBlockIndexConfig.redisConfig`.
//!
//! * [`layout`]: key names and the `PodEntry` field format (byte-compatible with llm-d).
//! * [`address`]: `redisConfig.address` as llm-d reads it.
//! * [`conn`]: the shared connection, reconnecting with backoff, failing fast meanwhile.
//! * [`lookup`]: one pipelined `HKEYS` per request (one round trip), longest runs.
//! * [`write`]: one event batch -> one read pipeline + one write pipeline.
//! * [`metrics`]: the `epp_kv_redis_*` series.
//!
//! Decision path: [`RedisIndex::lookup`] is awaited before the synchronous scheduler runs and
//! is bounded by `lookupTimeout`; on timeout or outage it returns an error the caller turns
//! into "no prefix scores" (counted), so requests are still routed.

pub mod address;
pub mod conn;
pub mod layout;
pub mod lookup;
pub mod metrics;
pub mod write;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::{Duration, Instant};

use self::conn::{Conn, ConnError};
use self::layout::PodEntry;
use self::metrics::Outcome;
use self::write::{Planner, REMOVE_SCRIPT, hashes_to_resolve, resolve_pipeline};
use super::events::{EventBatch, KvEvent};
use super::index::{ApplyStats, EndpointMatch, EventOutcome, KeyMode, TierWeights};
use super::metrics::KvCacheMetrics;
use super::subscriber::KvEventSource;

pub use self::address::AddressError;

/// Settings of the Redis index.
#[derive(Debug, Clone)]
pub struct RedisIndexConfig {
    /// `redisConfig.address` (normalized when the index is built).
    pub address: String,
    /// Bound of one decision-path lookup (connect included).
    pub lookup_timeout: Duration,
    /// Bound of each write and clear round trip (the connection's response timeout).
    pub write_timeout: Duration,
    /// Key derivation (as for the in-memory index).
    pub key_mode: KeyMode,
    /// Score weight per tier.
    pub tier_weights: TierWeights,
}

/// Default `lookupTimeout`.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_millis(20);
/// Default `writeTimeout`.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a lookup gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// `lookupTimeout` passed.
    #[error("Redis index lookup exceeded {0:?}")]
    Timeout(Duration),
    /// No connection.
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// The pipeline failed.
    #[error("Redis index lookup failed: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Why a write or clear failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No connection.
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// A command failed (or its response timed out).
    #[error("Redis index write failed: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Endpoint names <-> llm-d pod identifiers (`ip:port`, what the layout stores, so entries
/// written by llm-d and by other replicas name the same endpoint).
#[derive(Debug, Default)]
struct Identities {
    pod_of: HashMap<Arc<str>, String>,
    name_of: HashMap<String, Arc<str>>,
}

/// The shared index. `Send + Sync`; share as `Arc<RedisIndex>`.
#[derive(Debug)]
pub struct RedisIndex {
    conn: Conn,
    config: RedisIndexConfig,
    metrics: Arc<KvCacheMetrics>,
    ids: ArcSwap<Identities>,
}

/// Keys scanned per `SCAN` step of a clear (llm-d's batch).
const SCAN_BATCH: usize = 1024;

impl RedisIndex {
    /// Checks the address and builds the client; connects on first use.
    pub fn try_new(config: RedisIndexConfig, metrics: Arc<KvCacheMetrics>) -> Result<Self, AddressError> {
        let client = address::client(&config.address)?;
        Ok(Self { conn: Conn::new(client, config.write_timeout), config, metrics, ids: Default::default() })
    }

    /// Records the current endpoints: each is stored as `ip:port` and found by that.
    pub fn set_sources(&self, sources: &[KvEventSource]) {
        let mut ids = Identities::default();
        for s in sources {
            let pod = SocketAddr::new(s.address, s.port).to_string();
            ids.name_of.insert(pod.clone(), s.name.clone());
            ids.pod_of.insert(s.name.clone(), pod);
        }
        self.ids.store(Arc::new(ids));
    }

    /// The pod identifier stored for endpoint `name` (the name itself when unknown).
    pub fn pod_id(&self, name: &str) -> String {
        self.ids.load().pod_of.get(name).cloned().unwrap_or_else(|| name.to_string())
    }

    /// The configuration.
    pub fn config(&self) -> &RedisIndexConfig {
        &self.config
    }

    /// Opens the connection now (startup), so the first request does not pay for it.
    pub async fn connect(&self) -> Result<(), ConnError> {
        self.conn.get().await.map(|_| ())
    }

    /// Per endpoint, the longest run of `keys` held from the first (one pipelined round trip,
    /// bounded by `lookupTimeout`). Records `epp_kv_redis_lookups_total` and the latency.
    pub async fn lookup(&self, keys: &[u64]) -> Result<Vec<EndpointMatch>, LookupError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let t0 = Instant::now();
        let limit = self.config.lookup_timeout;
        let result = match tokio::time::timeout(limit, self.fetch(keys)).await {
            Ok(r) => r,
            Err(_) => Err(LookupError::Timeout(limit)),
        };
        let seconds = t0.elapsed().as_secs_f64();
        let r = &self.metrics.redis;
        match result {
            Ok(fields) => {
                r.record_lookup(Outcome::Ok, seconds);
                let mut found = lookup::longest_runs(&fields, &self.config.tier_weights);
                let ids = self.ids.load();
                for m in &mut found {
                    if let Some(name) = ids.name_of.get(&*m.endpoint) {
                        m.endpoint = name.clone();
                    }
                }
                let best = found.iter().map(|m| m.blocks).max().unwrap_or(0);
                self.metrics.record_lookup(seconds, keys.len(), best);
                Ok(found)
            }
            Err(e) => {
                let outcome = if matches!(e, LookupError::Timeout(_)) { Outcome::Timeout } else { Outcome::Error };
                r.record_lookup(outcome, seconds);
                Err(e)
            }
        }
    }

    async fn fetch(&self, keys: &[u64]) -> Result<Vec<Vec<Vec<u8>>>, LookupError> {
        let mut c = self.conn.get().await?;
        lookup::pipeline(keys).query_async(&mut c).await.map_err(|e| {
            self.conn.failed(&e);
            LookupError::Redis(e)
        })
    }

    /// Applies one batch published by endpoint `name` (`model`: the topic's model), in order.
    /// Each segment between `AllBlocksCleared` events costs two round trips. A segment that
    /// cannot be written is counted (`backend_error` outcome, `epp_kv_redis_writes_total`).
    pub async fn apply(&self, name: &str, model: &str, batch: &EventBatch) -> ApplyStats {
        let pod = self.pod_id(name);
        let endpoint = pod.as_str();
        let mut stats = ApplyStats::default();
        let mut rest = &batch.events[..];
        loop {
            let cut = rest.iter().position(|e| matches!(e, KvEvent::AllBlocksCleared)).unwrap_or(rest.len());
            let (segment, after) = rest.split_at(cut);
            if !segment.is_empty() {
                self.apply_segment(endpoint, model, segment, &mut stats).await;
            }
            let Some((clear, after)) = after.split_first() else { break };
            let outcome = match self.clear_pod(endpoint).await {
                Ok(_) => EventOutcome::Applied,
                Err(_) => EventOutcome::BackendError,
            };
            stats.record(clear.kind(), outcome);
            rest = after;
        }
        stats
    }

    async fn apply_segment(&self, endpoint: &str, model: &str, events: &[KvEvent], stats: &mut ApplyStats) {
        let t0 = Instant::now();
        let mut seg = ApplyStats::default();
        let result = self.write_segment(endpoint, model, events, &mut seg).await;
        let seconds = t0.elapsed().as_secs_f64();
        match result {
            Ok(()) => self.metrics.redis.record_write(Outcome::Ok, seconds),
            Err(e) => {
                self.metrics.redis.record_write(Outcome::Error, seconds);
                tracing::debug!(endpoint, error = %e, "Redis index: event batch not written");
                seg = ApplyStats::default();
                events.iter().for_each(|ev| seg.record(ev.kind(), EventOutcome::BackendError));
            }
        }
        add_stats(stats, &seg);
    }

    async fn write_segment(
        &self,
        endpoint: &str,
        model: &str,
        events: &[KvEvent],
        stats: &mut ApplyStats,
    ) -> Result<(), WriteError> {
        let mut c = self.conn.get().await?;
        let hashes = hashes_to_resolve(events, &self.config.key_mode);
        let mut known = HashMap::new();
        if !hashes.is_empty() {
            let mapped: Vec<Vec<String>> =
                resolve_pipeline(&hashes).query_async(&mut c).await.inspect_err(|e| self.conn.failed(e))?;
            for (h, members) in hashes.iter().zip(mapped) {
                let keys: Vec<u64> = members.iter().filter_map(|m| m.parse().ok()).collect();
                if !keys.is_empty() {
                    known.insert(*h, keys);
                }
            }
        }
        let mut planner =
            Planner { endpoint, model, mode: &self.config.key_mode, known, pipe: redis::pipe(), commands: 0 };
        planner.plan(events, stats);
        if planner.commands > 0 {
            let () = planner.pipe.query_async(&mut c).await.inspect_err(|e| self.conn.failed(e))?;
        }
        Ok(())
    }

    /// Removes every entry of endpoint `name` (all tiers, groups and speculative entries) from the
    /// whole keyspace: `SCAN` in steps of 1024 keys, skipping `engine:` ZSETs; per step one
    /// pipeline of `HKEYS` and one of removals. O(keyspace), off the decision path; rare
    /// (`AllBlocksCleared`, publisher restart, sequence gap, endpoint removed). Returns the
    /// number of entries removed.
    pub async fn clear_endpoint(&self, name: &str) -> Result<usize, WriteError> {
        self.clear_pod(&self.pod_id(name)).await
    }

    async fn clear_pod(&self, endpoint: &str) -> Result<usize, WriteError> {
        let t0 = Instant::now();
        let result = self.clear(endpoint).await;
        let outcome = if result.is_ok() { Outcome::Ok } else { Outcome::Error };
        self.metrics.redis.record_write(outcome, t0.elapsed().as_secs_f64());
        if let Err(e) = &result {
            tracing::warn!(endpoint, error = %e, "Redis index: endpoint entries not cleared");
        }
        result
    }

    async fn clear(&self, endpoint: &str) -> Result<usize, WriteError> {
        let mut c = self.conn.get().await?;
        let mut cursor: u64 = 0;
        let mut removed = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_BATCH)
                .query_async(&mut c)
                .await
                .inspect_err(|e| self.conn.failed(e))?;
            let keys: Vec<String> = keys.into_iter().filter(|k| !k.starts_with("engine:")).collect();
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                // Keys of other types (other users of the same Redis) answer WRONGTYPE: keep
                // per-command errors as values and skip them.
                pipe.ignore_errors();
                for k in &keys {
                    pipe.cmd("HKEYS").arg(k);
                }
                let fields: Vec<redis::Value> = pipe.query_async(&mut c).await.inspect_err(|e| self.conn.failed(e))?;
                let mut prune = redis::pipe();
                let mut n = 0;
                for (k, v) in keys.iter().zip(fields) {
                    let Ok(fields) = redis::from_redis_value::<Vec<Vec<u8>>>(v) else { continue };
                    for f in fields {
                        if PodEntry::parse(&f).is_some_and(|e| e.pod == endpoint) {
                            prune.cmd("EVAL").arg(REMOVE_SCRIPT).arg(1).arg(k).arg(f).arg("0").ignore();
                            n += 1;
                        }
                    }
                }
                if n > 0 {
                    let () = prune.query_async(&mut c).await.inspect_err(|e| self.conn.failed(e))?;
                    removed += n;
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(removed);
            }
        }
    }
}

fn add_stats(into: &mut ApplyStats, from: &ApplyStats) {
    for (a, b) in into.events.iter_mut().zip(&from.events) {
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    }
    into.stored_blocks += from.stored_blocks;
    into.removed_blocks += from.removed_blocks;
}
