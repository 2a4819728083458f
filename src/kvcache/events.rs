//! Engine-neutral KV-cache event types.
//!
//! Owns the typed form of one published batch (`EventBatch`) and its events
//! (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`). Produced by
//! [`super::decode`] (the only module that knows vLLM's msgpack layout) and
//! consumed by [`super::index`] and [`super::drift`]. Holds no behaviour beyond
//! small conversions.

/// A block hash as published by the engine, in vLLM's u64 form (the last
/// eight bytes of the digest read big-endian; negative ints reinterpreted).
pub type EngineHash = u64;

/// Storage tier of a block (vLLM's `medium`, lower-cased by llm-d).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// `"GPU"`, or nil from older senders.
    Gpu,
    /// `"CPU"` offload tier.
    Cpu,
    /// `"STORAGE"` (disk / remote) offload tier.
    Storage,
    /// Any other medium string (e.g. an LMCache tier name).
    Other,
    /// Not published by engines: entries epp adds itself for a request it
    /// just routed (`speculativeIndexing`), until KV events confirm them or
    /// `speculativeTTL` expires.
    Speculative,
}

impl Tier {
    /// Number of tiers; tier ids are `0..COUNT`.
    pub const COUNT: usize = 5;

    /// Maps vLLM's opaque `medium` string (case-insensitive); `None` is GPU.
    pub fn from_medium(medium: Option<&str>) -> Self {
        match medium {
            None | Some("") => Tier::Gpu,
            Some(m) if m.eq_ignore_ascii_case("gpu") => Tier::Gpu,
            Some(m) if m.eq_ignore_ascii_case("cpu") => Tier::Cpu,
            Some(m) if m.eq_ignore_ascii_case("storage") => Tier::Storage,
            Some(_) => Tier::Other,
        }
    }

    /// Compact id in `0..COUNT`.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Inverse of [`Tier::id`]; out-of-range ids map to `Other`.
    pub fn from_id(id: u8) -> Self {
        match id {
            0 => Tier::Gpu,
            1 => Tier::Cpu,
            2 => Tier::Storage,
            4 => Tier::Speculative,
            _ => Tier::Other,
        }
    }

    /// Label value for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Gpu => "gpu",
            Tier::Cpu => "cpu",
            Tier::Storage => "storage",
            Tier::Other => "other",
            Tier::Speculative => "speculative",
        }
    }
}

/// One untagged entry of a block's `extra_keys` in an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraKey {
    /// A bare string: LoRA name, cache salt, or (before vLLM 0.19) an MM identifier.
    Str(String),
    /// `[identifier, offset]` of a multimodal item (offset relative to the block).
    Mm { identifier: String, offset: i64 },
    /// Raw bytes (prompt-embeddings digest).
    Bytes(Vec<u8>),
    /// Any other shape; kept so positions stay aligned, otherwise ignored.
    Other,
}

/// `BlockStored`: consecutive full blocks now cached on the endpoint.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockStored {
    /// Hashes of consecutive full blocks, prefix order.
    pub block_hashes: Vec<EngineHash>,
    /// Hash of the block before `block_hashes[0]`; `None` when the run starts at
    /// token 0. Zero is a valid hash.
    pub parent_block_hash: Option<EngineHash>,
    /// All tokens of the stored blocks concatenated (empty for tier moves).
    pub token_ids: Vec<u32>,
    /// Tokens per block of this KV-cache group (0 for placeholder events).
    pub block_size: u32,
    /// Deprecated LoRA int id.
    pub lora_id: Option<u64>,
    /// Tier the blocks were stored in.
    pub medium: Option<Tier>,
    /// LoRA adapter name (vLLM 0.14+).
    pub lora_name: Option<String>,
    /// Per-block extra keys (vLLM 0.17+); empty when absent.
    pub extra_keys: Vec<Option<Vec<ExtraKey>>>,
    /// KV-cache group index (vLLM 0.20+).
    pub group_idx: Option<u32>,
    /// `kv_cache_spec_kind` (vLLM 0.22+), e.g. `full_attention`.
    pub kv_cache_spec_kind: Option<String>,
}

impl BlockStored {
    /// The tier, GPU when the sender did not say.
    pub fn tier(&self) -> Tier {
        self.medium.unwrap_or(Tier::Gpu)
    }
}

/// `BlockRemoved`: blocks evicted from the endpoint.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockRemoved {
    /// Hashes of the evicted blocks.
    pub block_hashes: Vec<EngineHash>,
    /// Tier they were evicted from.
    pub medium: Option<Tier>,
    /// KV-cache group index (vLLM 0.20+).
    pub group_idx: Option<u32>,
}

impl BlockRemoved {
    /// The tier, GPU when the sender did not say.
    pub fn tier(&self) -> Tier {
        self.medium.unwrap_or(Tier::Gpu)
    }
}

/// One KV-cache event.
#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    /// Blocks stored.
    BlockStored(BlockStored),
    /// Blocks removed.
    BlockRemoved(BlockRemoved),
    /// Every block of the endpoint (all tiers) is gone.
    AllBlocksCleared,
}

impl KvEvent {
    /// Metric label of the event kind.
    pub fn kind(&self) -> EventKind {
        match self {
            KvEvent::BlockStored(_) => EventKind::Stored,
            KvEvent::BlockRemoved(_) => EventKind::Removed,
            KvEvent::AllBlocksCleared => EventKind::Cleared,
        }
    }
}

/// Event kinds, used as metric label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Stored,
    Removed,
    Cleared,
    Unknown,
}

impl EventKind {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Stored => "block_stored",
            EventKind::Removed => "block_removed",
            EventKind::Cleared => "all_blocks_cleared",
            EventKind::Unknown => "unknown",
        }
    }
}

/// One published batch (one engine step).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventBatch {
    /// Publisher timestamp, seconds since the epoch.
    pub ts: f64,
    /// Events in the order they happened.
    pub events: Vec<KvEvent>,
    /// Data-parallel rank of the publishing engine, when set.
    pub data_parallel_rank: Option<u32>,
    /// Events with an unknown tag that were skipped.
    pub unknown_events: u32,
}
