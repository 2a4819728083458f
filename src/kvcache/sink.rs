//! Where the subscriber's workers apply KV events: the process's own [`PrefixIndex`] or the
//! [`RedisIndex`] shared with other replicas. The same three operations either way; only the
//! Redis ones wait on the network (off the decision path).

use std::sync::Arc;

use super::events::EventBatch;
use super::index::{ApplyStats, PrefixIndex};
use super::redis_index::RedisIndex;
use super::subscriber::KvEventSource;

/// An index the workers write.
#[derive(Debug, Clone)]
pub enum IndexSink {
    /// In-process sharded index.
    Memory(Arc<PrefixIndex>),
    /// Shared index in Redis (llm-d's layout).
    Redis(Arc<RedisIndex>),
}

impl From<Arc<PrefixIndex>> for IndexSink {
    fn from(index: Arc<PrefixIndex>) -> Self {
        IndexSink::Memory(index)
    }
}

impl From<Arc<RedisIndex>> for IndexSink {
    fn from(index: Arc<RedisIndex>) -> Self {
        IndexSink::Redis(index)
    }
}

impl IndexSink {
    /// Applies one batch of `endpoint` in order.
    pub async fn apply(&self, endpoint: &str, model: &str, batch: &EventBatch) -> ApplyStats {
        match self {
            IndexSink::Memory(i) => i.apply(endpoint, model, batch),
            IndexSink::Redis(r) => r.apply(endpoint, model, batch).await,
        }
    }

    /// Forgets every entry of `endpoint` (restart, gap); returns entries removed (0 when the
    /// shared index could not be reached: that is logged and counted there).
    pub async fn clear_endpoint(&self, endpoint: &str) -> usize {
        match self {
            IndexSink::Memory(i) => i.clear_endpoint(endpoint),
            IndexSink::Redis(r) => r.clear_endpoint(endpoint).await.unwrap_or(0),
        }
    }

    /// The endpoint left the pool.
    pub async fn remove_endpoint(&self, endpoint: &str) -> usize {
        match self {
            IndexSink::Memory(i) => i.remove_endpoint(endpoint),
            IndexSink::Redis(r) => r.clear_endpoint(endpoint).await.unwrap_or(0),
        }
    }

    /// The current endpoints (the shared index stores them by `ip:port`).
    pub fn set_sources(&self, sources: &[KvEventSource]) {
        if let IndexSink::Redis(r) = self {
            r.set_sources(sources);
        }
    }

    /// The in-process index, when that is where events go.
    pub fn memory(&self) -> Option<&Arc<PrefixIndex>> {
        match self {
            IndexSink::Memory(i) => Some(i),
            IndexSink::Redis(_) => None,
        }
    }
}
