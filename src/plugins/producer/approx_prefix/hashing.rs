//! The approximate producer's block-key chain. The chunking is llm-d's (router generation):
//! blocks of `block_size` tokens, a partial tail block hashed and appended too, the model and
//! `cache_salt` folded into the root. The hash is epp's own `epp-xxh3` step
//! ([`crate::kvcache::keys`]): root `XXH3(model || cache_salt)`, each block
//! `h_i = chain(h_{i-1}, XXH3(tokens as little-endian u32))`. llm-d uses XXH64 for both
//! steps; on a 10 KB prompt in 256-byte blocks XXH3 takes ~11,300 instructions against
//! XXH64's 14,600 (callgrind, request path). The keys never leave epp: they are compared only
//! with keys this epp, or a replica of the same version, computed (during a rolling update
//! across this change, replicas' synced entries miss until both run it).

use xxhash_rust::xxh3::xxh3_64;

use crate::kvcache::keys::epp_xxh3_block;

/// Root key of a prompt for `model` and an optional `cache_salt`.
pub fn root_key(model: &str, cache_salt: Option<&str>) -> u64 {
    let salt = cache_salt.unwrap_or("");
    let mut buf = Vec::with_capacity(model.len() + salt.len());
    buf.extend_from_slice(model.as_bytes());
    buf.extend_from_slice(salt.as_bytes());
    xxh3_64(&buf)
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
        parent = epp_xxh3_block(parent, block, &mut buf);
        keys.push(parent);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::keys::{RequestKeyAlgo, RequestKeyer};
    use proptest::prelude::*;

    #[test]
    fn cuts_like_llm_d_and_hashes_like_the_epp_xxh3_request_keys() {
        let tokens: Vec<u32> = (1..=130).collect();
        let keys = block_keys("Qwen/Qwen3-0.6B", None, &tokens, 64, 0);
        // Two full blocks and the partial tail block of 2 tokens.
        assert_eq!(keys.len(), 3);
        let root = root_key("Qwen/Qwen3-0.6B", None);
        let full = RequestKeyer::new(RequestKeyAlgo::EppXxh3, "").chain(root, &tokens, 64, &[]);
        assert_eq!(keys[..2], full[..]);
        assert_eq!(keys[2], epp_xxh3_block(keys[1], &tokens[128..], &mut Vec::new()));
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
