//! The approximate producer's block-key chain. The chunking is llm-d's (router generation):
//! blocks of `block_size` tokens, a partial tail block hashed and appended too, the model and
//! `cache_salt` folded into the root. The hash: root `rapidhash_v3(model || cache_salt)`, each
//! block `h_i = chain(h_{i-1}, rapidhash_v3(tokens as little-endian u32))`, `chain` being the
//! `epp-xxh3` step of [`crate::kvcache::keys`]. rapidhash's V3 function is portable and its
//! output fixed across the crate's versions (its README's promise), which the keys need: replicas
//! exchange them. llm-d uses XXH64 for both steps; on a 10 KB prompt in 256-byte blocks XXH64
//! took ~14,600 instructions, XXH3 ~11,300 (xxhash-rust's long-input path, SSE2), rapidhash
//! V3 ~6,900 (callgrind, request path). The keys never leave epp: they are compared only with
//! keys this epp, or a replica of the same version, computed (during a rolling update across a
//! change of the hash, replicas' synced entries miss until both run the same one).

use rapidhash::v3::rapidhash_v3;

use crate::kvcache::keys::chain_block_with;

/// Root key of a prompt for `model` and an optional `cache_salt`.
pub fn root_key(model: &str, cache_salt: Option<&str>) -> u64 {
    let salt = cache_salt.unwrap_or("");
    let mut buf = Vec::with_capacity(model.len() + salt.len());
    buf.extend_from_slice(model.as_bytes());
    buf.extend_from_slice(salt.as_bytes());
    rapidhash_v3(&buf)
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
    // Scratch for machines where the tokens' memory is not already little-endian.
    let mut buf = Vec::new();
    for block in tokens.chunks(block_size).take(limit) {
        parent = chain_block_with(parent, block, &mut buf, rapidhash_v3);
        keys.push(parent);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The first key of the test prompt below, as rapidhash 4.5.1 gave it.
    const FIRST_KEY: u64 = 14_820_170_784_809_630_478;

    #[test]
    fn cuts_like_llm_d_and_chains_rapidhash_with_the_epp_xxh3_step() {
        let tokens: Vec<u32> = (1..=130).collect();
        let keys = block_keys("Qwen/Qwen3-0.6B", None, &tokens, 64, 0);
        // Two full blocks and the partial tail block of 2 tokens.
        assert_eq!(keys.len(), 3);
        assert_eq!(root_key("Qwen/Qwen3-0.6B", None), rapidhash_v3(b"Qwen/Qwen3-0.6B"));
        let mut parent = root_key("Qwen/Qwen3-0.6B", None);
        for (i, block) in tokens.chunks(64).enumerate() {
            parent = chain_block_with(parent, block, &mut Vec::new(), rapidhash_v3);
            assert_eq!(keys[i], parent);
        }
        // Fixed outputs: a change of hash (or of the crate's promise) shows here.
        assert_eq!(keys[0], FIRST_KEY);
        assert_eq!(block_keys("Qwen/Qwen3-0.6B", None, &tokens, 64, 2), keys[..2]);
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
