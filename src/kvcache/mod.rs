//! Precise prefix-cache routing from vLLM KV events.
//!
//! ```text
//! vLLM PUB --ZMQ [topic, seq, payload]--> subscriber::socket (SUB, bound or per endpoint)
//!   --bounded queue per worker (drop + count)--> subscriber::worker (per endpoint, in order)
//!       sequence (gap / restart) --replay (DEALER)--> decode (msgpack -> events)
//!       --> drift (sampled hash verification) --> index::apply (request keys) --> index tables
//! scheduler --keys::request_keys(model, salt, tokens, B)--> PrefixIndex::lookup --> EndpointMatch
//! ```
//!
//! Module map (one job each):
//! * [`events`]: engine-neutral event types.
//! * [`decode`]: vLLM msgpack batch -> events, every encoding 0.10–0.33 (pure).
//! * [`hashing`]: vLLM's own block hashing (sha256, sha256_cbor, xxhash,
//!   xxhash_cbor; NONE_HASH by version; u64 form) for the engine-key mode and drift.
//! * [`keys`]: epp's request keys (`epp-xxh3` / `cbor-fnv` / `xxh64`, model or LoRA in the
//!   root) and the engine -> request block alignment.
//! * [`index`]: sharded prefix index, event application, engine-hash mapping.
//! * [`sink`]: where workers apply events (in-memory or Redis index).
//! * [`sequence`]: per-stream seq tracking (gap, duplicate, restart).
//! * [`speculative`]: entries added for just-routed requests, expired after a TTL.
//! * [`subscriber`]: ZeroMQ sockets, topics, workers, replay.
//! * [`drift`]: do published hashes match the configured vLLM hashing?
//! * [`redis_index`]: the same index kept in Redis in llm-d's layout, shared by replicas.
//! * [`metrics`]: Prometheus series (`epp_kv_*`).
//! * [`board`]: the live SUB sockets and prefix indexes, for `/debug/state`.
//!
//! Not here: tokenisation, scoring policy (plugins read [`EndpointMatch`]),
//! endpoint discovery (the caller feeds a `watch` of [`KvEventSource`]).

pub mod board;
pub mod decode;
pub mod drift;
pub mod encode;
pub mod events;
pub mod hashing;
pub mod index;
pub mod keys;
pub mod metrics;
pub mod redis_index;
pub mod sequence;
pub mod sink;
pub mod speculative;
pub mod status;
pub mod subscriber;

pub use decode::{DecodeError, decode_batch};
pub use drift::{DriftConfig, DriftDetector};
pub use encode::encode_batch;
pub use events::{EventBatch, KvEvent, Tier};
pub use hashing::{HashAlgo, VllmHasher, VllmVersion};
pub use index::{EndpointMatch, IndexConfig, KeyMode, PrefixIndex, TierWeights};
pub use keys::{RequestKeyAlgo, RequestKeyer, request_keys};
pub use metrics::KvCacheMetrics;
pub use redis_index::{RedisIndex, RedisIndexConfig};
pub use sink::IndexSink;
pub use speculative::{SpeculativeChange, SpeculativeLedger};
pub use subscriber::{KvEventSource, Subscriber, SubscriberConfig, SubscriberHandle};
