//! vLLM's own prefix-cache block hashing (reference §5), byte-exact.
//!
//! `h_i = H(serialize((parent_i, tuple(tokens_i), extra_keys_i)))` over full
//! blocks, `parent_0 = NONE_HASH`, with `H`/`serialize` chosen by
//! `--prefix-caching-hash-algo` (`sha256` = pickle + SHA-256, `sha256_cbor`,
//! `xxhash` = pickle + XXH3-128, `xxhash_cbor`). The u64 form in events is the
//! last eight digest bytes big-endian. Used by the engine-key index mode (the
//! request side must reproduce the engine's hashes) and by drift detection.
//! epp's own request keys live in [`super::keys`]; this module does not
//! know about events or the index.

mod encode;

pub use encode::PyValue;
pub(crate) use encode::{CBOR_NULL, cbor, cbor_head, cbor_text, pickle};

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::str::FromStr;

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashingError {
    /// Unknown `--prefix-caching-hash-algo` name.
    #[error("unknown vLLM hash algorithm {0:?} (want sha256, sha256_cbor, xxhash or xxhash_cbor)")]
    UnknownAlgo(String),
    /// Unparsable vLLM version string.
    #[error("invalid vLLM version {0:?}")]
    BadVersion(String),
    /// NONE_HASH is random per process for this (algorithm, version) without a seed.
    #[error("NONE_HASH is random per vLLM process for {algo} on {version} without PYTHONHASHSEED")]
    RandomNoneHash { algo: HashAlgo, version: VllmVersion },
}

/// `--prefix-caching-hash-algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgo {
    /// pickle protocol 5 + SHA-256 (vLLM default since 0.10.2).
    Sha256,
    /// canonical CBOR + SHA-256.
    Sha256Cbor,
    /// pickle protocol 5 + XXH3-128.
    Xxhash,
    /// canonical CBOR + XXH3-128.
    XxhashCbor,
}

impl HashAlgo {
    /// All algorithms, for diagnosis.
    pub const ALL: [HashAlgo; 4] = [HashAlgo::Sha256, HashAlgo::Sha256Cbor, HashAlgo::Xxhash, HashAlgo::XxhashCbor];

    /// vLLM's name.
    pub fn as_str(self) -> &'static str {
        match self {
            HashAlgo::Sha256 => "sha256",
            HashAlgo::Sha256Cbor => "sha256_cbor",
            HashAlgo::Xxhash => "xxhash",
            HashAlgo::XxhashCbor => "xxhash_cbor",
        }
    }

    fn is_cbor(self) -> bool {
        matches!(self, HashAlgo::Sha256Cbor | HashAlgo::XxhashCbor)
    }

    /// Serialises `v` as this algorithm does before hashing.
    pub fn serialize(self, out: &mut Vec<u8>, v: &PyValue<'_>) {
        if self.is_cbor() { cbor(out, v) } else { pickle(out, v) }
    }

    /// Digest of already-serialised bytes.
    pub fn digest(self, bytes: &[u8]) -> BlockDigest {
        match self {
            HashAlgo::Sha256 | HashAlgo::Sha256Cbor => BlockDigest::from_slice(&Sha256::digest(bytes)),
            HashAlgo::Xxhash | HashAlgo::XxhashCbor => {
                BlockDigest::from_slice(&xxhash_rust::xxh3::xxh3_128(bytes).to_be_bytes())
            }
        }
    }
}

impl fmt::Display for HashAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HashAlgo {
    type Err = HashingError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HashAlgo::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| HashingError::UnknownAlgo(s.to_owned()))
    }
}

/// A vLLM release `major.minor` (patch ignored: no hashing change in a patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VllmVersion {
    pub major: u16,
    pub minor: u16,
}

impl VllmVersion {
    /// The newest release the project knows (the vectors' release).
    pub const CURRENT: VllmVersion = VllmVersion { major: 0, minor: 33 };

    /// Builds a version.
    pub const fn new(major: u16, minor: u16) -> Self {
        VllmVersion { major, minor }
    }
}

impl fmt::Display for VllmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for VllmVersion {
    type Err = HashingError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || HashingError::BadVersion(s.to_owned());
        let mut parts = s.trim_start_matches('v').split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        Ok(VllmVersion { major, minor })
    }
}

/// A block digest: 32 bytes (SHA-256) or 16 (XXH3-128).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockDigest {
    bytes: [u8; 32],
    len: u8,
}

impl BlockDigest {
    fn from_slice(s: &[u8]) -> Self {
        let mut bytes = [0u8; 32];
        let len = s.len().min(32);
        bytes[..len].copy_from_slice(&s[..len]);
        BlockDigest { bytes, len: len as u8 }
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// vLLM's u64 form: last eight bytes, big-endian.
    pub fn to_u64(&self) -> u64 {
        let b = self.as_bytes();
        b[b.len().saturating_sub(8)..].iter().fold(0, |acc, x| (acc << 8) | u64::from(*x))
    }
}

impl fmt::Debug for BlockDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The seed string hashed into NONE_HASH (reference §5.3), or an error when
/// vLLM used per-process randomness.
pub fn none_hash_seed(
    algo: HashAlgo,
    pythonhashseed: Option<&str>,
    version: VllmVersion,
) -> Result<&str, HashingError> {
    match pythonhashseed {
        Some(s) => Ok(s),
        None if version >= VllmVersion::new(0, 29) && matches!(algo, HashAlgo::Sha256 | HashAlgo::Sha256Cbor) => {
            Ok("vllm-none-hash")
        }
        None => Err(HashingError::RandomNoneHash { algo, version }),
    }
}

/// NONE_HASH = H(serialize(seed_string)).
pub fn none_hash(
    algo: HashAlgo,
    pythonhashseed: Option<&str>,
    version: VllmVersion,
) -> Result<BlockDigest, HashingError> {
    let seed = none_hash_seed(algo, pythonhashseed, version)?;
    let mut buf = Vec::with_capacity(32);
    algo.serialize(&mut buf, &PyValue::Str(seed));
    Ok(algo.digest(&buf))
}

/// Serialises the triple `(parent, tuple(tokens), extra)` into `out`.
pub fn block_preimage(
    algo: HashAlgo,
    out: &mut Vec<u8>,
    parent: &BlockDigest,
    tokens: &[u32],
    extra: Option<&PyValue<'_>>,
) {
    let triple = PyValue::Tuple(vec![
        PyValue::Bytes(parent.as_bytes()),
        PyValue::Ints(tokens),
        extra.cloned().unwrap_or(PyValue::None),
    ]);
    algo.serialize(out, &triple);
}

/// Per-request extra keys as vLLM folds them in (hash form by version, §5.5).
#[derive(Debug, Clone, Copy, Default)]
pub struct HashExtras<'a> {
    /// LoRA `(name, path)`; 0.31+ hashes `("lora", name, path)`, earlier the name.
    pub lora: Option<(&'a str, &'a str)>,
    /// `cache_salt`, block 0 only.
    pub cache_salt: Option<&'a str>,
}

/// A configured vLLM hasher: algorithm, NONE_HASH and version rules.
#[derive(Debug, Clone)]
pub struct VllmHasher {
    algo: HashAlgo,
    version: VllmVersion,
    none_hash: BlockDigest,
}

impl VllmHasher {
    /// Fails when NONE_HASH is not reproducible for these settings.
    pub fn try_new(algo: HashAlgo, pythonhashseed: Option<&str>, version: VllmVersion) -> Result<Self, HashingError> {
        Ok(VllmHasher { algo, version, none_hash: none_hash(algo, pythonhashseed, version)? })
    }

    /// The algorithm.
    pub fn algo(&self) -> HashAlgo {
        self.algo
    }

    /// NONE_HASH of this configuration.
    pub fn none_hash(&self) -> BlockDigest {
        self.none_hash
    }

    fn extra_for<'a>(&self, block: usize, extras: &HashExtras<'a>) -> Option<PyValue<'a>> {
        let new_form = self.version >= VllmVersion::new(0, 31);
        let mut keys = Vec::new();
        if let Some((name, path)) = extras.lora {
            keys.push(if new_form {
                PyValue::Tuple(vec![PyValue::Str("lora"), PyValue::Str(name), PyValue::Str(path)])
            } else {
                PyValue::Str(name)
            });
        }
        if let (0, Some(salt)) = (block, extras.cache_salt) {
            keys.push(if new_form {
                PyValue::Tuple(vec![PyValue::Str("cache_salt"), PyValue::Str(salt)])
            } else {
                PyValue::Str(salt)
            });
        }
        (!keys.is_empty()).then_some(PyValue::Tuple(keys))
    }

    /// Digests of the full blocks of `tokens` (the partial tail is ignored).
    pub fn block_digests(&self, tokens: &[u32], block_size: usize, extras: &HashExtras<'_>) -> Vec<BlockDigest> {
        if block_size == 0 {
            return Vec::new();
        }
        let mut parent = self.none_hash;
        let mut buf = Vec::with_capacity(16 + block_size * 5);
        let mut out = Vec::with_capacity(tokens.len() / block_size);
        for (i, chunk) in tokens.chunks_exact(block_size).enumerate() {
            buf.clear();
            let extra = self.extra_for(i, extras);
            block_preimage(self.algo, &mut buf, &parent, chunk, extra.as_ref());
            parent = self.algo.digest(&buf);
            out.push(parent);
        }
        out
    }

    /// The u64 hashes vLLM would publish for `tokens`.
    pub fn block_hashes_u64(&self, tokens: &[u32], block_size: usize, extras: &HashExtras<'_>) -> Vec<u64> {
        self.block_digests(tokens, block_size, extras).iter().map(BlockDigest::to_u64).collect()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
