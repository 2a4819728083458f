//! Parameters of `precise-prefix-cache-producer` (and of the deprecated
//! `precise-prefix-cache-scorer` shim), mirroring llm-d's schema, and their translation into
//! the index, subscriber and drift settings of `kvcache`.

use std::time::Duration;

use serde::Deserialize;

use crate::kvcache::index::{IndexConfig, KeyMode, TierWeights};
use crate::kvcache::redis_index::{DEFAULT_LOOKUP_TIMEOUT, DEFAULT_WRITE_TIMEOUT, RedisIndexConfig, address};
use crate::kvcache::subscriber::WireLimits;
use crate::kvcache::{DriftConfig, HashAlgo, RequestKeyAlgo, RequestKeyer, SubscriberConfig, VllmHasher, VllmVersion};

/// Top-level parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Block size, hash seed and algorithm.
    pub token_processor_config: TokenProcessorConfig,
    /// Index back-end.
    pub indexer_config: IndexerConfig,
    /// Tier weights (also accepted under `indexerConfig`).
    pub kv_cache_backend_configs: Option<Vec<BackendWeight>>,
    /// KV-event subscription.
    pub kv_events_config: KvEventsConfig,
    /// Record request keys on the chosen endpoint before events confirm them.
    pub speculative_indexing: bool,
    /// Lifetime of speculative entries.
    #[serde(rename = "speculativeTTL")]
    pub speculative_ttl: Option<String>,
}

/// `tokenProcessorConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenProcessorConfig {
    /// Block size in tokens (default 16).
    pub block_size_tokens: Option<usize>,
    /// Deprecated alias of `blockSizeTokens`.
    pub block_size: Option<usize>,
    /// Seed string of the keys (llm-d `hashSeed`; for vLLM algorithms: `PYTHONHASHSEED`).
    pub hash_seed: String,
    /// `""` (`epp-xxh3`, or `cbor-fnv` with `redisConfig`), `cbor-fnv`, `xxh64`,
    /// `epp-xxh3` (epp's request keys) or a vLLM algorithm (`sha256`, `sha256_cbor`,
    /// `xxhash`, `xxhash_cbor`: the engine's own hashes are the keys).
    pub hash_algorithm: String,
    /// epp extension: the vLLM release (NONE_HASH rules) for engine keys and drift checks.
    pub vllm_version: Option<String>,
}

/// `indexerConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct IndexerConfig {
    /// Back-end selection.
    pub kv_block_index_config: KvBlockIndexConfig,
    /// Tier weights.
    pub kv_cache_backend_configs: Option<Vec<BackendWeight>>,
    /// Tokenizer pool (only the deprecated scorer shim accepts it; ignored there).
    pub tokenizers_pool_config: Option<serde_json::Value>,
}

/// `kvBlockIndexConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KvBlockIndexConfig {
    /// In-memory index.
    pub in_memory_config: Option<InMemoryConfig>,
    /// Cost-aware index (not available: rejected).
    pub cost_aware_memory_config: Option<serde_json::Value>,
    /// Redis index shared by replicas (llm-d's key layout).
    pub redis_config: Option<RedisConfig>,
    /// Index metrics (always on in epp).
    pub enable_metrics: bool,
    /// Accepted for compatibility.
    pub metrics_logging_interval: Option<serde_json::Value>,
}

/// `redisConfig`: llm-d's `RedisIndexConfig` plus epp's decision-path bounds.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RedisConfig {
    /// `redis://`, `rediss://`, `unix://`, `valkey://`, `valkeys://`, or `host:port`.
    pub address: String,
    /// `redis` (default) or `valkey`; documentation only, as in llm-d.
    pub backend_type: String,
    /// Accepted like llm-d (which also connects over TCP).
    #[serde(rename = "enableRDMA")]
    pub enable_rdma: bool,
    /// epp extension: bound of one decision-path lookup (default `20ms`).
    pub lookup_timeout: Option<String>,
    /// epp extension: bound of each write round trip (default `2s`).
    pub write_timeout: Option<String>,
}

/// `inMemoryConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InMemoryConfig {
    /// Maximum keys.
    pub size: Option<usize>,
    /// Endpoints per key in llm-d's layout (accepted; epp stores holders compactly).
    pub pod_cache_size: Option<usize>,
}

/// `{name, weight}` of a KV tier.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendWeight {
    /// `gpu`, `cpu`, ...
    pub name: String,
    /// Score weight.
    pub weight: f64,
}

/// `kvEventsConfig`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KvEventsConfig {
    /// Central mode: bind one SUB socket here.
    pub zmq_endpoint: String,
    /// Topic prefix.
    pub topic_filter: String,
    /// Worker shards.
    pub concurrency: usize,
    /// `vllm` (or empty).
    pub engine_type: String,
    /// One SUB socket per endpoint.
    pub discover_pods: Option<bool>,
    /// Pod-discovery ports.
    pub pod_discovery_config: PodDiscoveryConfig,
    /// epp extension: largest ZMTP frame a publisher may send, in bytes (default 64 MiB).
    pub max_frame_bytes: Option<usize>,
    /// epp extension: largest multipart message, in bytes (default 64 MiB).
    pub max_message_bytes: Option<usize>,
    /// epp extension: most frames in one multipart message (default 8).
    pub max_frames_per_message: Option<usize>,
    /// epp extension: time a publisher connection has for the ZMTP handshake (default `10s`).
    pub handshake_timeout: Option<String>,
    /// epp extension: most connections the central socket holds at once (default 256).
    pub max_connections: Option<usize>,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            zmq_endpoint: String::new(),
            topic_filter: "kv@".into(),
            concurrency: 4,
            engine_type: String::new(),
            discover_pods: None,
            pod_discovery_config: PodDiscoveryConfig::default(),
            max_frame_bytes: None,
            max_message_bytes: None,
            max_frames_per_message: None,
            handshake_timeout: None,
            max_connections: None,
        }
    }
}

/// `podDiscoveryConfig`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PodDiscoveryConfig {
    /// Publisher port of rank 0.
    pub socket_port: u16,
    /// Replay ROUTER port of rank 0 (0 = no replay).
    pub replay_socket_port: u16,
    /// Vestigial in llm-d; accepted.
    pub pod_label_selector: String,
    /// Vestigial in llm-d; accepted.
    pub pod_namespace: String,
}

impl Default for PodDiscoveryConfig {
    fn default() -> Self {
        Self {
            socket_port: 5557,
            replay_socket_port: 0,
            pod_label_selector: String::new(),
            pod_namespace: String::new(),
        }
    }
}

/// Settings derived from the parameters.
#[derive(Debug)]
pub struct Derived {
    /// Index settings.
    pub index: IndexConfig,
    /// Subscriber settings.
    pub subscriber: SubscriberConfig,
    /// Drift check, when a vLLM algorithm is stated.
    pub drift: Option<DriftConfig>,
    /// Request-side hasher in engine-key mode.
    pub engine_hasher: Option<VllmHasher>,
    /// Block size used to cut prompts.
    pub block_size: usize,
    /// The shared index, when `redisConfig` selects it.
    pub redis: Option<RedisIndexConfig>,
    /// Lifetime of speculative entries when `speculativeIndexing` is on (`speculativeTTL`,
    /// 2s when unset or not positive); `None` when off.
    pub speculative: Option<Duration>,
}

/// `speculativeTTL` default (llm-d).
const DEFAULT_SPECULATIVE_TTL: Duration = Duration::from_secs(2);

fn vllm_algo(name: &str) -> Option<HashAlgo> {
    HashAlgo::ALL.into_iter().find(|a| a.as_str() == name)
}

impl Params {
    /// Validates and translates; errors name the parameter (relative path, message).
    pub fn derive(&self) -> Result<Derived, (String, String)> {
        let tp = &self.token_processor_config;
        let block_size = tp.block_size_tokens.or(tp.block_size).unwrap_or(16);
        if block_size == 0 {
            return Err(("tokenProcessorConfig.blockSizeTokens".into(), "must be > 0".into()));
        }
        let kb = &self.indexer_config.kv_block_index_config;
        if kb.cost_aware_memory_config.is_some() {
            return Err((
                "indexerConfig.kvBlockIndexConfig.costAwareMemoryConfig".into(),
                "not available in this build (use inMemoryConfig or redisConfig)".into(),
            ));
        }
        let version = match &tp.vllm_version {
            Some(v) => {
                v.parse::<VllmVersion>().map_err(|e| ("tokenProcessorConfig.vllmVersion".to_string(), e.to_string()))?
            }
            None => VllmVersion::CURRENT,
        };
        let seed = Some(tp.hash_seed.as_str()).filter(|s| !s.is_empty());
        let (key_mode, engine_hasher, drift) = match vllm_algo(&tp.hash_algorithm) {
            Some(algo) => {
                let hasher = VllmHasher::try_new(algo, seed, version)
                    .map_err(|e| ("tokenProcessorConfig.hashSeed".to_string(), e.to_string()))?;
                let drift = DriftConfig {
                    algo,
                    pythonhashseed: seed.map(str::to_string),
                    block_size,
                    vllm_version: version,
                    sample_every: 16,
                };
                (KeyMode::Engine { hasher: Some(hasher.clone()), block_size }, Some(hasher), Some(drift))
            }
            None => {
                // Unset: epp's faster keys when no other program reads them (no
                // shared index); llm-d's default where llm-d's indexers share the keys.
                let algo: RequestKeyAlgo = match tp.hash_algorithm.as_str() {
                    "" if kb.redis_config.is_none() => RequestKeyAlgo::EppXxh3,
                    name => name.parse().map_err(|e: crate::kvcache::keys::UnknownKeyAlgo| {
                        (
                            "tokenProcessorConfig.hashAlgorithm".to_string(),
                            format!("{e}; or a vLLM algorithm: sha256, sha256_cbor, xxhash, xxhash_cbor"),
                        )
                    })?,
                };
                (KeyMode::Request { keyer: RequestKeyer::new(algo, &tp.hash_seed), block_size }, None, None)
            }
        };
        let mut weights = TierWeights::default();
        for (i, b) in self
            .kv_cache_backend_configs
            .iter()
            .chain(self.indexer_config.kv_cache_backend_configs.iter())
            .flatten()
            .enumerate()
        {
            let tier = match b.name.as_str() {
                "gpu" => 0,
                "cpu" => 1,
                other => {
                    return Err((
                        format!("kvCacheBackendConfigs[{i}].name"),
                        format!("unknown tier {other:?} (gpu, cpu)"),
                    ));
                }
            };
            if !(b.weight.is_finite() && b.weight >= 0.0) {
                return Err((format!("kvCacheBackendConfigs[{i}].weight"), "must be a finite number >= 0".into()));
            }
            weights.0[tier] = b.weight;
        }
        let mut index = IndexConfig { key_mode, tier_weights: weights, ..IndexConfig::default() };
        if let Some(size) = kb.in_memory_config.as_ref().and_then(|m| m.size) {
            index.capacity = size.max(1);
        }
        let ev = &self.kv_events_config;
        if !ev.engine_type.is_empty() && ev.engine_type != "vllm" {
            return Err((
                "kvEventsConfig.engineType".into(),
                format!("unsupported engine {:?} (vllm)", ev.engine_type),
            ));
        }
        let central = Some(ev.zmq_endpoint.clone()).filter(|e| !e.is_empty());
        let defaults = WireLimits::default();
        let mut limits = defaults;
        for (name, value, default, field) in [
            ("maxFrameBytes", ev.max_frame_bytes, defaults.max_frame_bytes, &mut limits.max_frame_bytes),
            ("maxMessageBytes", ev.max_message_bytes, defaults.max_message_bytes, &mut limits.max_message_bytes),
            (
                "maxFramesPerMessage",
                ev.max_frames_per_message,
                defaults.max_frames_per_message,
                &mut limits.max_frames_per_message,
            ),
        ] {
            *field = match value {
                Some(0) => return Err((format!("kvEventsConfig.{name}"), "must be at least 1".into())),
                Some(v) => v,
                None => default,
            };
        }
        if let Some(max) = ev.max_connections {
            if max == 0 {
                return Err(("kvEventsConfig.maxConnections".into(), "must be at least 1".into()));
            }
            limits.max_connections = max;
        }
        if let Some(text) = ev.handshake_timeout.as_deref() {
            let path = || "kvEventsConfig.handshakeTimeout".to_string();
            let timeout = humantime::parse_duration(text.trim()).map_err(|e| (path(), e.to_string()))?;
            if timeout.is_zero() {
                return Err((path(), "must be positive (a handshake bound cannot be disabled)".into()));
            }
            limits.handshake_timeout = timeout;
        }
        let subscriber = SubscriberConfig {
            zmq_endpoint: central.clone(),
            topic_filter: ev.topic_filter.clone(),
            concurrency: ev.concurrency.max(1),
            // llm-d: pod discovery defaults on; a central endpoint alone means central mode.
            discover_pods: ev.discover_pods.unwrap_or(central.is_none()),
            socket_port: ev.pod_discovery_config.socket_port,
            replay_socket_port: Some(ev.pod_discovery_config.replay_socket_port).filter(|p| *p > 0),
            limits,
            ..SubscriberConfig::default()
        };
        let ttl = match self.speculative_ttl.as_deref().map(str::trim) {
            // llm-d: a TTL <= 0 means the default. humantime has no sign, so "-1s" and "0" land here too.
            Some(s) if !s.is_empty() && !s.starts_with('-') && s != "0" => {
                humantime::parse_duration(s).map_err(|e| ("speculativeTTL".to_string(), e.to_string()))?
            }
            _ => DEFAULT_SPECULATIVE_TTL,
        };
        let ttl = if ttl.is_zero() { DEFAULT_SPECULATIVE_TTL } else { ttl };
        let speculative = self.speculative_indexing.then_some(ttl);
        let redis = match &kb.redis_config {
            Some(rc) => Some(derive_redis(rc, &index)?),
            None => None,
        };
        if redis.is_some() && speculative.is_some() {
            return Err((
                "speculativeIndexing".into(),
                "not available with kvBlockIndexConfig.redisConfig (speculative entries are per replica)".into(),
            ));
        }
        Ok(Derived { index, subscriber, drift, engine_hasher, block_size, redis, speculative })
    }
}

/// `redisConfig` -> the Redis index settings (address checked, timeouts parsed).
fn derive_redis(rc: &RedisConfig, index: &IndexConfig) -> Result<RedisIndexConfig, (String, String)> {
    const PATH: &str = "indexerConfig.kvBlockIndexConfig.redisConfig";
    address::client(&rc.address).map_err(|e| (format!("{PATH}.address"), e.to_string()))?;
    if !matches!(rc.backend_type.as_str(), "" | "redis" | "valkey") {
        return Err((format!("{PATH}.backendType"), format!("unknown backend {:?} (redis, valkey)", rc.backend_type)));
    }
    let timeout = |name: &str, value: &Option<String>, default: Duration| -> Result<Duration, (String, String)> {
        let Some(text) = value.as_deref() else { return Ok(default) };
        let path = || format!("{PATH}.{name}");
        let d = humantime::parse_duration(text.trim()).map_err(|e| (path(), e.to_string()))?;
        if d.is_zero() {
            return Err((path(), "must be positive".into()));
        }
        Ok(d)
    };
    Ok(RedisIndexConfig {
        address: rc.address.clone(),
        lookup_timeout: timeout("lookupTimeout", &rc.lookup_timeout, DEFAULT_LOOKUP_TIMEOUT)?,
        write_timeout: timeout("writeTimeout", &rc.write_timeout, DEFAULT_WRITE_TIMEOUT)?,
        key_mode: index.key_mode.clone(),
        tier_weights: index.tier_weights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(speculative_indexing: bool, ttl: Option<&str>) -> Result<Derived, (String, String)> {
        Params { speculative_indexing, speculative_ttl: ttl.map(str::to_string), ..Params::default() }.derive()
    }

    #[test]
    fn speculative_ttl_defaults_and_validates() {
        assert_eq!(derive(false, Some("5s")).expect("off").speculative, None);
        assert_eq!(derive(true, None).expect("default").speculative, Some(Duration::from_secs(2)));
        assert_eq!(derive(true, Some("500ms")).expect("ms").speculative, Some(Duration::from_millis(500)));
        assert_eq!(derive(true, Some("1m30s")).expect("go form").speculative, Some(Duration::from_secs(90)));
        for not_positive in ["0", "0s", "-1s"] {
            assert_eq!(derive(true, Some(not_positive)).expect("<= 0").speculative, Some(Duration::from_secs(2)));
        }
        let (path, _) = derive(true, Some("soon")).expect_err("bad duration");
        assert_eq!(path, "speculativeTTL");
    }

    #[test]
    fn wire_limits_default_and_override() {
        assert_eq!(derive(false, None).expect("defaults").subscriber.limits, WireLimits::default());
        let yaml = "kvEventsConfig: {maxFrameBytes: 1048576, maxMessageBytes: 2097152, maxFramesPerMessage: 4}";
        let params: Params = serde_yaml::from_str(yaml).expect("parses");
        let limits = params.derive().expect("derives").subscriber.limits;
        assert_eq!(
            limits,
            WireLimits {
                max_frame_bytes: 1 << 20,
                max_message_bytes: 2 << 20,
                max_frames_per_message: 4,
                ..WireLimits::default()
            }
        );
        let params: Params = serde_yaml::from_str("kvEventsConfig: {maxMessageBytes: 0}").expect("parses");
        assert_eq!(params.derive().expect_err("zero").0, "kvEventsConfig.maxMessageBytes");
    }

    #[test]
    fn connection_cap_and_handshake_timeout_default_and_override() {
        let defaults = derive(false, None).expect("defaults").subscriber.limits;
        assert_eq!((defaults.max_connections, defaults.handshake_timeout), (256, Duration::from_secs(10)));
        let yaml = "kvEventsConfig: {maxConnections: 8, handshakeTimeout: 1500ms}";
        let limits = serde_yaml::from_str::<Params>(yaml).expect("parses").derive().expect("derives").subscriber.limits;
        assert_eq!((limits.max_connections, limits.handshake_timeout), (8, Duration::from_millis(1500)));
        for (yaml, path) in [
            ("kvEventsConfig: {maxConnections: 0}", "kvEventsConfig.maxConnections"),
            ("kvEventsConfig: {handshakeTimeout: 0s}", "kvEventsConfig.handshakeTimeout"),
            ("kvEventsConfig: {handshakeTimeout: soon}", "kvEventsConfig.handshakeTimeout"),
        ] {
            let params: Params = serde_yaml::from_str(yaml).expect("parses");
            assert_eq!(params.derive().expect_err(yaml).0, path);
        }
    }

    #[test]
    fn unset_hash_algorithm_is_epp_xxh3_in_memory_and_cbor_fnv_with_redis() {
        let algo =
            |yaml: &str| match serde_yaml::from_str::<Params>(yaml).expect(yaml).derive().expect(yaml).index.key_mode {
                KeyMode::Request { keyer, .. } => Some(keyer.algo()),
                KeyMode::Engine { .. } => None,
            };
        let redis = "indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: 'h:1'}}}";
        assert_eq!(algo("{}"), Some(RequestKeyAlgo::EppXxh3));
        assert_eq!(algo("tokenProcessorConfig: {hashAlgorithm: ''}"), Some(RequestKeyAlgo::EppXxh3));
        assert_eq!(algo("tokenProcessorConfig: {hashAlgorithm: epp-xxh3}"), Some(RequestKeyAlgo::EppXxh3));
        assert_eq!(algo(redis), Some(RequestKeyAlgo::CborFnv));
        assert_eq!(algo("tokenProcessorConfig: {hashAlgorithm: cbor-fnv}"), Some(RequestKeyAlgo::CborFnv));
        assert_eq!(algo("tokenProcessorConfig: {hashAlgorithm: xxh64}"), Some(RequestKeyAlgo::Xxh64));
        let both = "{tokenProcessorConfig: {hashAlgorithm: epp-xxh3}, indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: 'h:1'}}}}";
        assert_eq!(algo(both), Some(RequestKeyAlgo::EppXxh3));
        assert_eq!(algo("tokenProcessorConfig: {hashAlgorithm: sha256, hashSeed: '42'}"), None);
    }

    #[test]
    fn redis_config_selects_the_shared_index_and_checks_its_fields() {
        let yaml =
            "indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: 'redis-master:6379', lookupTimeout: 5ms}}}";
        let redis = serde_yaml::from_str::<Params>(yaml).expect("parses").derive().expect("derives").redis;
        let redis = redis.expect("redis selected");
        assert_eq!((redis.address.as_str(), redis.lookup_timeout), ("redis-master:6379", Duration::from_millis(5)));
        assert_eq!(redis.write_timeout, DEFAULT_WRITE_TIMEOUT);
        let base = "indexerConfig.kvBlockIndexConfig.redisConfig";
        for (yaml, path) in [
            ("{address: 'http://h:1'}", format!("{base}.address")),
            ("{address: ''}", format!("{base}.address")),
            ("{address: 'redis://h:notaport'}", format!("{base}.address")),
            ("{address: 'h:1', backendType: memcached}", format!("{base}.backendType")),
            ("{address: 'h:1', lookupTimeout: 0s}", format!("{base}.lookupTimeout")),
            ("{address: 'h:1', writeTimeout: soon}", format!("{base}.writeTimeout")),
        ] {
            let full = format!("indexerConfig: {{kvBlockIndexConfig: {{redisConfig: {yaml}}}}}");
            let params: Params = serde_yaml::from_str(&full).expect(&full);
            assert_eq!(params.derive().expect_err(&full).0, path, "{full}");
        }
        let spec = "speculativeIndexing: true\nindexerConfig: {kvBlockIndexConfig: {redisConfig: {address: 'h:1'}}}";
        let params: Params = serde_yaml::from_str(spec).expect("parses");
        assert_eq!(params.derive().expect_err("speculative").0, "speculativeIndexing");
        let cost = "indexerConfig: {kvBlockIndexConfig: {costAwareMemoryConfig: {size: 2GiB}}}";
        let params: Params = serde_yaml::from_str(cost).expect("parses");
        assert_eq!(params.derive().expect_err("cost").0, "indexerConfig.kvBlockIndexConfig.costAwareMemoryConfig");
        assert!(derive(false, None).expect("default").redis.is_none());
    }
}
