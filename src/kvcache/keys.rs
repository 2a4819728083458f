//! epp's request keys: the index key of each full block of a prompt.
//!
//! Keys are computed by epp itself from token ids (llm-d's eras C/D,
//! reference §6), both for requests and for the `token_ids` carried by
//! `BlockStored` events, so vLLM's hash algorithm, seed and block size need
//! not match epp's. The model (or LoRA adapter name) is folded into the root,
//! and a `cache_salt` is appended to block 0's extras.
//!
//! * `cbor-fnv` (default): `init = FNV64a(seed)`, `root = FNV64a(CBOR([init,
//!   nil, model]))`, `key = FNV64a(CBOR([parent, [tokens…], extras]))` with
//!   extras nil or `[{"Hash": id}, …]`.
//! * `xxh64`: `init = XXH64(seed)`, `root = XXH64(LE64(init) ‖ LE64(len) ‖
//!   model)`, `key = XXH64(LE64(parent) ‖ LE32(t)… ‖ (LE64(len) ‖ id)…)`.
//! * `epp-xxh3` (epp's own, the default for an in-memory index; see
//!   `docs/kvcache.md` "Keys"): `init = XXH3(seed)`,
//!   `root = chain(init, XXH3(model))`, `key = chain(parent, XXH3(LE32(t)… ‖
//!   (LE64(len) ‖ id)…))` with `chain` one folded 64×64→128 multiply and
//!   XXH3's avalanche. The content hash does not depend on the parent, so the
//!   blocks of an event hash in parallel and only `chain` is sequential.
//!   No llm-d component computes these keys.
//!
//! Only full blocks get keys; the trailing partial block is dropped.
//! Also holds the engine-key → request-key alignment rule used across
//! different block sizes.

use std::str::FromStr;

use super::hashing::{CBOR_NULL, cbor_head, cbor_text};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv64a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// FNV-1a fed with canonical CBOR items as they are encoded: the same value
/// as `fnv64a` over the encoded bytes, without writing them anywhere. FNV-1a
/// is one xor and one multiply per byte, each depending on the last, so a
/// block key costs ~76 dependent steps; a zero byte skips the xor, which
/// lets the compiler merge its multiply with the previous one.
struct FnvCbor(u64);

impl Default for FnvCbor {
    fn default() -> Self {
        FnvCbor(FNV_OFFSET)
    }
}

impl FnvCbor {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }

    #[inline(always)]
    fn zero(&mut self) {
        self.0 = self.0.wrapping_mul(FNV_PRIME);
    }

    /// The low `n` bytes of `x`, big-endian.
    #[inline(always)]
    fn be(&mut self, x: u64, n: u32) {
        for i in (0..n).rev() {
            self.byte((x >> (8 * i)) as u8);
        }
    }

    /// A CBOR head in the shortest form, as `cbor_head` writes it.
    #[inline(always)]
    fn head(&mut self, major: u8, arg: u64) {
        let m = major << 5;
        if arg < 24 {
            self.byte(m | arg as u8);
        } else if arg <= 0xff {
            self.byte(m | 24);
            self.byte(arg as u8);
        } else if arg <= 0xffff {
            self.byte(m | 25);
            self.be(arg, 2);
        } else if arg <= 0xff_ffff {
            // Four argument bytes, the first one zero (token ids below 2^24).
            self.byte(m | 26);
            self.zero();
            self.be(arg, 3);
        } else if arg <= 0xffff_ffff {
            self.byte(m | 26);
            self.be(arg, 4);
        } else {
            self.byte(m | 27);
            self.be(arg, 8);
        }
    }

    fn text(&mut self, s: &str) {
        self.head(3, s.len() as u64);
        s.bytes().for_each(|b| self.byte(b));
    }
}

/// `epp-xxh3` chain constants (xxh3's `kSecret` words 0 and 1).
const CHAIN_K0: u64 = 0xbe4b_a423_396c_feb8;
const CHAIN_K1: u64 = 0x1cad_21f7_2c81_017c;

/// `epp-xxh3` chain step: `parent` and a block's content hash folded by one
/// 64×64→128 multiply (xxh3's `mul128_fold64`), then xxh3's avalanche.
#[inline(always)]
fn fold_chain(parent: u64, content: u64) -> u64 {
    let p = u128::from(parent ^ CHAIN_K0) * u128::from(content ^ CHAIN_K1);
    let h = (p as u64) ^ ((p >> 64) as u64);
    let h = (h ^ (h >> 37)).wrapping_mul(0x1656_6791_9E37_79F9);
    h ^ (h >> 32)
}

/// The little-endian bytes of `tokens`, borrowed where the machine is little-endian.
#[cfg(target_endian = "little")]
fn le_token_bytes(tokens: &[u32]) -> Option<&[u8]> {
    // SAFETY: u32 has no padding and every byte pattern is a valid u8; the
    // slice covers exactly the tokens' memory, which stays borrowed.
    Some(unsafe { std::slice::from_raw_parts(tokens.as_ptr().cast::<u8>(), std::mem::size_of_val(tokens)) })
}

#[cfg(not(target_endian = "little"))]
fn le_token_bytes(_: &[u32]) -> Option<&[u8]> {
    None
}

/// `epp-xxh3` content hash of one block: `XXH3(LE32(t)… ‖ (LE64(len) ‖ id)…)`.
fn xxh3_content(tokens: &[u32], extras: &[&str], buf: &mut Vec<u8>) -> u64 {
    content_hash(tokens, extras, buf, xxhash_rust::xxh3::xxh3_64)
}

/// `hash(LE32(t)… ‖ (LE64(len) ‖ id)…)`, the tokens hashed in place where the machine is
/// little-endian and there are no extras.
fn content_hash(tokens: &[u32], extras: &[&str], buf: &mut Vec<u8>, hash: fn(&[u8]) -> u64) -> u64 {
    if extras.is_empty()
        && let Some(bytes) = le_token_bytes(tokens)
    {
        return hash(bytes);
    }
    buf.clear();
    for t in tokens {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    for id in extras {
        buf.extend_from_slice(&(id.len() as u64).to_le_bytes());
        buf.extend_from_slice(id.as_bytes());
    }
    hash(buf)
}

/// A block key of the `epp-xxh3` chain step with another content hash:
/// `chain(parent, hash(LE32(t)…))` (the approximate prefix producer's keys, which no other
/// program reads either).
pub(crate) fn chain_block_with(parent: u64, tokens: &[u32], buf: &mut Vec<u8>, hash: fn(&[u8]) -> u64) -> u64 {
    fold_chain(parent, content_hash(tokens, &[], buf, hash))
}

/// Request-key algorithm (llm-d `hashAlgorithm`, plus epp's own `epp-xxh3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestKeyAlgo {
    /// `cbor-fnv` (llm-d default, era C).
    #[default]
    CborFnv,
    /// `xxh64` (era D).
    Xxh64,
    /// `epp-xxh3`: epp's own keys, only for indexes no other program reads.
    EppXxh3,
}

impl RequestKeyAlgo {
    /// The `hashAlgorithm` name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKeyAlgo::CborFnv => "cbor-fnv",
            RequestKeyAlgo::Xxh64 => "xxh64",
            RequestKeyAlgo::EppXxh3 => "epp-xxh3",
        }
    }
}

/// Unknown `hashAlgorithm` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown request-key algorithm {0:?} (want cbor-fnv, xxh64 or epp-xxh3)")]
pub struct UnknownKeyAlgo(pub String);

impl FromStr for RequestKeyAlgo {
    type Err = UnknownKeyAlgo;
    /// `""` is llm-d's default, `cbor-fnv`; the plugin itself picks `epp-xxh3`
    /// for an unset `hashAlgorithm` when no shared index is configured.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "cbor-fnv" => Ok(RequestKeyAlgo::CborFnv),
            "xxh64" => Ok(RequestKeyAlgo::Xxh64),
            "epp-xxh3" => Ok(RequestKeyAlgo::EppXxh3),
            other => Err(UnknownKeyAlgo(other.to_owned())),
        }
    }
}

/// Computes request keys for one (algorithm, hash seed). Cheap to clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestKeyer {
    algo: RequestKeyAlgo,
    init: u64,
}

impl Default for RequestKeyer {
    fn default() -> Self {
        RequestKeyer::new(RequestKeyAlgo::CborFnv, "")
    }
}

impl RequestKeyer {
    /// `hash_seed` is llm-d's `hashSeed` string (default `""`).
    pub fn new(algo: RequestKeyAlgo, hash_seed: &str) -> Self {
        let init = match algo {
            RequestKeyAlgo::CborFnv => fnv64a(hash_seed.as_bytes()),
            RequestKeyAlgo::Xxh64 => xxhash_rust::xxh64::xxh64(hash_seed.as_bytes(), 0),
            RequestKeyAlgo::EppXxh3 => xxhash_rust::xxh3::xxh3_64(hash_seed.as_bytes()),
        };
        RequestKeyer { algo, init }
    }

    /// The algorithm.
    pub fn algo(&self) -> RequestKeyAlgo {
        self.algo
    }

    /// The parent key of block 0 for `model` (the LoRA name when set).
    pub fn root(&self, model: &str) -> u64 {
        match self.algo {
            RequestKeyAlgo::CborFnv => {
                let mut buf = Vec::with_capacity(16 + model.len());
                cbor_head(&mut buf, 4, 3);
                cbor_head(&mut buf, 0, self.init);
                buf.push(CBOR_NULL);
                cbor_text(&mut buf, model);
                fnv64a(&buf)
            }
            RequestKeyAlgo::Xxh64 => {
                let mut buf = Vec::with_capacity(16 + model.len());
                buf.extend_from_slice(&self.init.to_le_bytes());
                buf.extend_from_slice(&(model.len() as u64).to_le_bytes());
                buf.extend_from_slice(model.as_bytes());
                xxhash_rust::xxh64::xxh64(&buf, 0)
            }
            RequestKeyAlgo::EppXxh3 => fold_chain(self.init, xxhash_rust::xxh3::xxh3_64(model.as_bytes())),
        }
    }

    /// Key of one block given its parent key; `buf` is scratch space (the
    /// `cbor-fnv` key is hashed as it is encoded and does not use it).
    pub fn block_key(&self, parent: u64, tokens: &[u32], extras: &[&str], buf: &mut Vec<u8>) -> u64 {
        match self.algo {
            RequestKeyAlgo::CborFnv => {
                let mut h = FnvCbor::default();
                h.head(4, 3);
                h.head(0, parent);
                h.head(4, tokens.len() as u64);
                for t in tokens {
                    h.head(0, u64::from(*t));
                }
                if extras.is_empty() {
                    h.byte(CBOR_NULL);
                } else {
                    h.head(4, extras.len() as u64);
                    for id in extras {
                        h.head(5, 1);
                        h.text("Hash");
                        h.text(id);
                    }
                }
                h.0
            }
            RequestKeyAlgo::Xxh64 => {
                buf.clear();
                buf.extend_from_slice(&parent.to_le_bytes());
                for t in tokens {
                    buf.extend_from_slice(&t.to_le_bytes());
                }
                for id in extras {
                    buf.extend_from_slice(&(id.len() as u64).to_le_bytes());
                    buf.extend_from_slice(id.as_bytes());
                }
                xxhash_rust::xxh64::xxh64(buf, 0)
            }
            RequestKeyAlgo::EppXxh3 => fold_chain(parent, xxh3_content(tokens, extras, buf)),
        }
    }

    /// Keys of the full blocks of `tokens` chained from `parent`;
    /// `extras[i]` are block i's extra identifiers (missing = none).
    pub fn chain(&self, parent: u64, tokens: &[u32], block_size: usize, extras: &[Vec<&str>]) -> Vec<u64> {
        if block_size == 0 {
            return Vec::new();
        }
        let mut buf = Vec::with_capacity(16 + block_size * 5);
        let mut out = Vec::with_capacity(tokens.len() / block_size);
        if self.algo == RequestKeyAlgo::EppXxh3 {
            // Content hashes first (independent of each other), then the chain.
            for (i, chunk) in tokens.chunks_exact(block_size).enumerate() {
                let ex = extras.get(i).map_or(&[][..], Vec::as_slice);
                out.push(xxh3_content(chunk, ex, &mut buf));
            }
            let mut parent = parent;
            for k in &mut out {
                parent = fold_chain(parent, *k);
                *k = parent;
            }
            return out;
        }
        let mut parent = parent;
        for (i, chunk) in tokens.chunks_exact(block_size).enumerate() {
            let ex = extras.get(i).map_or(&[][..], Vec::as_slice);
            parent = self.block_key(parent, chunk, ex, &mut buf);
            out.push(parent);
        }
        out
    }

    /// Request keys of a prompt: root from the model (or LoRA name), the cache
    /// salt appended to block 0's extras.
    pub fn prompt_keys(
        &self,
        model_or_lora: &str,
        cache_salt: Option<&str>,
        tokens: &[u32],
        block_size: usize,
    ) -> Vec<u64> {
        let extras: Vec<Vec<&str>> = cache_salt.map(|s| vec![vec![s]]).unwrap_or_default();
        self.chain(self.root(model_or_lora), tokens, block_size, &extras)
    }
}

/// Request keys with the default keyer (`cbor-fnv`, hash seed `""`), as the
/// event side computes them from `BlockStored.token_ids` for the same model.
pub fn request_keys(model_or_lora: &str, extra: Option<&str>, tokens: &[u32], block_size: usize) -> Vec<u64> {
    RequestKeyer::default().prompt_keys(model_or_lora, extra, tokens, block_size)
}

/// Proportional alignment of `engine` blocks to `request` blocks (reference
/// §8): with `n = max(e, r)`, pair `(⌊i·e/n⌋, ⌊i·r/n⌋)` for `i in 0..n`.
/// Empty when either side is empty.
pub fn align_blocks(engine: usize, request: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = if engine == 0 || request == 0 { 0 } else { engine.max(request) };
    (0..n).map(move |i| (i * engine / n, i * request / n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const QWEN: &str = "Qwen/Qwen3-0.6B";

    #[test]
    fn llmd_golden_values() {
        let granite = [8197, 438, 322, 18926, 432, 45600, 49];
        let k = RequestKeyer::default();
        assert_eq!(k.root("ibm-granite/granite-3.1-8b-instruct"), 2648472209273074206);
        assert_eq!(request_keys("ibm-granite/granite-3.1-8b-instruct", None, &granite, 4), [1334984470577408192]);
        let toks: Vec<u32> = (1..=8).collect();
        assert_eq!(k.root(QWEN), 12449044111902447012);
        assert_eq!(request_keys(QWEN, None, &toks, 4), [12477849404512668933, 14303407131179071413]);
        let k42 = RequestKeyer::new(RequestKeyAlgo::CborFnv, "42");
        assert_eq!(k42.root(QWEN), 14010089855884424915);
        assert_eq!(k42.prompt_keys(QWEN, None, &toks, 4), [4406848051386130229, 7944303163977277727]);
        assert_eq!(k42.prompt_keys(QWEN, Some("s1"), &toks, 4), [7408827517224164317, 11060440328183241153]);
        let x = RequestKeyer::new(RequestKeyAlgo::Xxh64, "42");
        assert_eq!(x.root(QWEN), 14978290342925878229);
        assert_eq!(x.prompt_keys(QWEN, None, &toks, 4), [9416431423761570426, 16293734464712791250]);
    }

    #[test]
    fn alignment_handles_both_directions() {
        assert_eq!(align_blocks(4, 1).collect::<Vec<_>>(), [(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(align_blocks(1, 4).collect::<Vec<_>>(), [(0, 0), (0, 1), (0, 2), (0, 3)]);
        assert_eq!(align_blocks(0, 3).count(), 0);
    }

    /// The `cbor-fnv` key as llm-d defines it: FNV-1a over the encoded bytes.
    fn encoded_then_hashed(parent: u64, tokens: &[u32], extras: &[&str]) -> u64 {
        use crate::kvcache::hashing::{PyValue, cbor};
        let mut buf = Vec::new();
        cbor_head(&mut buf, 4, 3);
        cbor_head(&mut buf, 0, parent);
        cbor(&mut buf, &PyValue::Ints(tokens));
        if extras.is_empty() {
            buf.push(CBOR_NULL);
        } else {
            cbor_head(&mut buf, 4, extras.len() as u64);
            for id in extras {
                cbor_head(&mut buf, 5, 1);
                cbor_text(&mut buf, "Hash");
                cbor_text(&mut buf, id);
            }
        }
        fnv64a(&buf)
    }

    #[test]
    fn epp_xxh3_chains_content_hashes() {
        let k = RequestKeyer::new(RequestKeyAlgo::EppXxh3, "");
        let toks: Vec<u32> = (1..=8).collect();
        let keys = k.prompt_keys(QWEN, None, &toks, 4);
        let c0 = xxhash_rust::xxh3::xxh3_64(&[1u32, 2, 3, 4].map(u32::to_le_bytes).concat());
        assert_eq!(keys[0], fold_chain(k.root(QWEN), c0));
        assert_eq!(keys[0], k.block_key(k.root(QWEN), &toks[..4], &[], &mut Vec::new()));
        assert_eq!(keys[1], k.block_key(keys[0], &toks[4..], &[], &mut Vec::new()));
        // Seed, model, salt and block order all change the keys.
        assert_ne!(RequestKeyer::new(RequestKeyAlgo::EppXxh3, "42").prompt_keys(QWEN, None, &toks, 4), keys);
        assert_ne!(k.prompt_keys("other", None, &toks, 4), keys);
        assert_ne!(k.prompt_keys(QWEN, Some("s1"), &toks, 4), keys);
        let swapped: Vec<u32> = toks[4..].iter().chain(&toks[..4]).copied().collect();
        assert_ne!(k.prompt_keys(QWEN, None, &swapped, 4)[1], keys[1]);
        assert_eq!("epp-xxh3".parse::<RequestKeyAlgo>(), Ok(RequestKeyAlgo::EppXxh3));
        assert_eq!(RequestKeyAlgo::EppXxh3.as_str(), "epp-xxh3");
    }

    proptest! {
        #[test]
        fn epp_xxh3_chain_equals_block_by_block(
            toks in proptest::collection::vec(any::<u32>(), 0..100),
            bs in 1usize..12,
            salt in proptest::option::of("[a-z]{0,8}"),
        ) {
            let k = RequestKeyer::new(RequestKeyAlgo::EppXxh3, "seed");
            let extras: Vec<Vec<&str>> = salt.as_deref().map(|s| vec![vec![s]]).unwrap_or_default();
            let chained = k.chain(7, &toks, bs, &extras);
            let mut parent = 7;
            for (i, chunk) in toks.chunks_exact(bs).enumerate() {
                let ex = extras.get(i).map_or(&[][..], Vec::as_slice);
                parent = k.block_key(parent, chunk, ex, &mut Vec::new());
                prop_assert_eq!(chained[i], parent);
            }
        }

        #[test]
        fn streamed_cbor_fnv_equals_hashing_the_encoding(
            parent in any::<u64>(),
            // Every CBOR argument width: < 24, one, two, three (zero top byte) and four bytes.
            tokens in proptest::collection::vec(prop_oneof![0u32..24, 24u32..256, 256u32..65_536, 65_536u32..(1 << 24), any::<u32>()], 0..40),
            extras in proptest::collection::vec("[a-z0-9]{0,30}", 0..3),
        ) {
            let extras: Vec<&str> = extras.iter().map(String::as_str).collect();
            let got = RequestKeyer::default().block_key(parent, &tokens, &extras, &mut Vec::new());
            prop_assert_eq!(got, encoded_then_hashed(parent, &tokens, &extras));
        }

        #[test]
        fn chain_is_deterministic_and_prefix_stable(toks in proptest::collection::vec(any::<u32>(), 0..200), cut in 0usize..200, bs in 1usize..20) {
            let all = request_keys("m", None, &toks, bs);
            prop_assert_eq!(&all, &request_keys("m", None, &toks, bs));
            prop_assert_eq!(all.len(), toks.len() / bs);
            let cut = cut.min(toks.len());
            let prefix = request_keys("m", None, &toks[..cut], bs);
            prop_assert_eq!(&all[..prefix.len()], &prefix[..]);
        }
    }
}
