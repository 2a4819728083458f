//! The approximate producer's block-key chain (llm-d router generation): the root is
//! `XXH64(model || cache_salt)`; each block of `block_size` tokens gets
//! `blockID = XXH64(tokens as little-endian u32)` and key
//! `h_i = XXH64(LE64(blockID) || LE64(h_{i-1}))`. A partial tail block is hashed and
//! appended too. Keys are process-local (never compared with Go's), but the chunking decides
//! routing quality, so it follows llm-d exactly.

use xxhash_rust::xxh64::xxh64;

/// Root key of a prompt for `model` and an optional `cache_salt`.
pub fn root_key(model: &str, cache_salt: Option<&str>) -> u64 {
    let salt = cache_salt.unwrap_or("");
    let mut buf = Vec::with_capacity(model.len() + salt.len());
    buf.extend_from_slice(model.as_bytes());
    buf.extend_from_slice(salt.as_bytes());
    xxh64(&buf, 0)
}

/// Block keys of `tokens` cut into blocks of `block_size` (>= 1), at most `max_blocks`
/// (0 = unlimited).
pub fn block_keys(
    model: &str,
    cache_salt: Option<&str>,
    tokens: &[u32],
    block_size: usize,
    max_blocks: usize,
) -> Vec<u64> {
    let block_size = block_size.max(1);
    let mut parent = root_key(model, cache_salt);
    let limit = if max_blocks == 0 { usize::MAX } else { max_blocks };
    let mut keys = Vec::with_capacity(tokens.len().div_ceil(block_size).min(limit));
    // One buffer for every block, written as fixed 4-byte lanes (a plain copy on
    // little-endian targets) rather than grown token by token.
    let mut buffer = vec![0u8; block_size.min(tokens.len()) * 4];
    for block in tokens.chunks(block_size).take(limit) {
        let bytes = &mut buffer[..block.len() * 4];
        for (lane, t) in bytes.chunks_exact_mut(4).zip(block) {
            lane.copy_from_slice(&t.to_le_bytes());
        }
        let block_id = xxh64(bytes, 0);
        let mut pair = [0u8; 16];
        pair[..8].copy_from_slice(&block_id.to_le_bytes());
        pair[8..].copy_from_slice(&parent.to_le_bytes());
        parent = xxh64(&pair, 0);
        keys.push(parent);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_the_reference_worked_example() {
        let tokens: Vec<u32> = (1..=130).collect();
        assert_eq!(root_key("Qwen/Qwen3-0.6B", None), 10348022192660952561);
        assert_eq!(
            block_keys("Qwen/Qwen3-0.6B", None, &tokens, 64, 0),
            vec![3702239835469819307, 14669821669029447566, 5783085884993421512]
        );
    }

    #[test]
    fn salt_and_model_change_every_key() {
        let tokens: Vec<u32> = (0..64).collect();
        let a = block_keys("m", None, &tokens, 16, 0);
        assert_ne!(a, block_keys("m", Some("s"), &tokens, 16, 0));
        assert_ne!(a, block_keys("n", None, &tokens, 16, 0));
    }

    proptest! {
        #[test]
        fn chain_is_deterministic_and_prefix_stable(tokens in proptest::collection::vec(any::<u32>(), 0..300), extra in proptest::collection::vec(any::<u32>(), 1..100)) {
            let bs = 16;
            let short = block_keys("m", None, &tokens, bs, 0);
            prop_assert_eq!(&short, &block_keys("m", None, &tokens, bs, 0));
            let mut longer = tokens.clone();
            longer.extend(extra);
            let long = block_keys("m", None, &longer, bs, 0);
            let full = tokens.len() / bs;
            prop_assert_eq!(&short[..full], &long[..full]);
        }
    }
}
