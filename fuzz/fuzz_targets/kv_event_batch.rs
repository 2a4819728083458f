//! One KV-event payload (the third ZMQ frame) as a publisher sends it: the msgpack decoder for
//! every vLLM encoding, then applying the batch to a small index in both key modes. Must never
//! panic, whatever the bytes.
#![no_main]

use std::sync::LazyLock;

use epp::kvcache::decode::decode_batch;
use epp::kvcache::index::{IndexConfig, KeyMode, PrefixIndex};
use epp::kvcache::keys::RequestKeyer;
use libfuzzer_sys::fuzz_target;

fn small(key_mode: KeyMode) -> PrefixIndex {
    PrefixIndex::new(IndexConfig { key_mode, capacity: 4096, shards: 2, engine_map_capacity: 4096, ..IndexConfig::default() })
}

static REQUEST_KEYS: LazyLock<PrefixIndex> =
    LazyLock::new(|| small(KeyMode::Request { keyer: RequestKeyer::default(), block_size: 16 }));
static ENGINE_KEYS: LazyLock<PrefixIndex> = LazyLock::new(|| small(KeyMode::Engine { hasher: None, block_size: 16 }));

fuzz_target!(|data: &[u8]| {
    if let Ok(batch) = decode_batch(data) {
        REQUEST_KEYS.apply("pod-a", "m", &batch);
        ENGINE_KEYS.apply("pod-a", "m", &batch);
    }
});
