//! Drift detection: do an endpoint's published hashes match vLLM's hashing as
//! configured (algorithm, `PYTHONHASHSEED`, block size)?
//!
//! Only root runs can be recomputed from an event alone (a continuation's
//! parent is published as the u64 form, not the full digest), and only
//! without LoRA (0.31+ hashes the adapter path, which events do not carry)
//! or other extra keys. A sample of such `BlockStored` events (every
//! `sample_every`-th per endpoint) is recomputed; a mismatch is attributed to
//! the likely cause — block size, hash seed or algorithm — counted per
//! endpoint and logged when the cause changes or at most once a minute.
//! Also records the block size each endpoint publishes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::events::BlockStored;
use super::hashing::{HashAlgo, HashExtras, HashingError, VllmHasher, VllmVersion};
use super::metrics::KvCacheMetrics;

const LOG_EVERY: Duration = Duration::from_secs(60);
const MAX_CHECKED_BLOCKS: usize = 4;

/// What the config says vLLM uses.
#[derive(Debug, Clone)]
pub struct DriftConfig {
    /// `--prefix-caching-hash-algo`.
    pub algo: HashAlgo,
    /// `PYTHONHASHSEED` of the vLLM pods (`None` = unset).
    pub pythonhashseed: Option<String>,
    /// `--block-size`.
    pub block_size: usize,
    /// vLLM release (NONE_HASH rules).
    pub vllm_version: VllmVersion,
    /// Check one of every N eligible events per endpoint (≥ 1).
    pub sample_every: u32,
}

/// Likely cause of a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftCause {
    /// The endpoint publishes another block size than configured.
    BlockSize,
    /// Hashes differ with the configured algorithm: seed (or an unknown setting).
    HashSeed,
    /// Another algorithm reproduces the hashes.
    Algorithm,
}

impl DriftCause {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftCause::BlockSize => "block_size",
            DriftCause::HashSeed => "hash_seed",
            DriftCause::Algorithm => "algorithm",
        }
    }
}

/// Result of looking at one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftVerdict {
    /// Not eligible or not sampled.
    Skipped,
    /// Recomputed hashes match.
    Match,
    /// Mismatch with its likely cause.
    Mismatch(DriftCause),
}

#[derive(Debug, Default)]
struct EndpointDrift {
    seen: u32,
    last_cause: Option<DriftCause>,
    last_log: Option<Instant>,
}

/// Shared detector (`Send + Sync`).
#[derive(Debug)]
pub struct DriftDetector {
    config: DriftConfig,
    hasher: VllmHasher,
    alternatives: Vec<VllmHasher>,
    state: Mutex<HashMap<String, EndpointDrift>>,
}

impl DriftDetector {
    /// Fails when the configured NONE_HASH is not reproducible.
    pub fn try_new(config: DriftConfig) -> Result<Self, HashingError> {
        let seed = config.pythonhashseed.as_deref();
        let hasher = VllmHasher::try_new(config.algo, seed, config.vllm_version)?;
        // Other algorithms with the configured and the unset seed, where reproducible.
        let alternatives = HashAlgo::ALL
            .into_iter()
            .flat_map(|a| [Some(seed), seed.map(|_| None)].into_iter().flatten().map(move |s| (a, s)))
            .filter(|(a, s)| !(*a == config.algo && *s == seed))
            .filter_map(|(a, s)| VllmHasher::try_new(a, s, config.vllm_version).ok())
            .collect();
        Ok(DriftDetector { config, hasher, alternatives, state: Mutex::new(HashMap::new()) })
    }

    fn eligible(s: &BlockStored) -> bool {
        let bs = s.block_size as usize;
        s.parent_block_hash.is_none()
            && s.lora_name.as_deref().is_none_or(str::is_empty)
            && s.extra_keys.iter().all(Option::is_none)
            && bs > 0
            && !s.block_hashes.is_empty()
            && s.token_ids.len() == bs * s.block_hashes.len()
    }

    fn classify(&self, s: &BlockStored) -> DriftVerdict {
        let bs = s.block_size as usize;
        let n = s.block_hashes.len().min(MAX_CHECKED_BLOCKS);
        let tokens = &s.token_ids[..n * bs];
        let want = &s.block_hashes[..n];
        let none = HashExtras::default();
        if bs != self.config.block_size {
            return DriftVerdict::Mismatch(DriftCause::BlockSize);
        }
        if self.hasher.block_hashes_u64(tokens, bs, &none) == want {
            return DriftVerdict::Match;
        }
        let other_algo = self
            .alternatives
            .iter()
            .filter(|h| h.algo() != self.config.algo)
            .any(|h| h.block_hashes_u64(tokens, bs, &none) == want);
        DriftVerdict::Mismatch(if other_algo { DriftCause::Algorithm } else { DriftCause::HashSeed })
    }

    /// Looks at one `BlockStored` from `endpoint`, updating metrics.
    pub fn observe(&self, endpoint: &str, s: &BlockStored, metrics: Option<&KvCacheMetrics>) -> DriftVerdict {
        if let (Some(m), true) = (metrics, s.block_size > 0) {
            m.endpoint_block_size.with_label_values(&[endpoint]).set(i64::from(s.block_size));
        }
        if !Self::eligible(s) {
            return DriftVerdict::Skipped;
        }
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let st = state.entry(endpoint.to_owned()).or_default();
        st.seen = st.seen.wrapping_add(1);
        if !(st.seen - 1).is_multiple_of(self.config.sample_every.max(1)) {
            return DriftVerdict::Skipped;
        }
        let verdict = self.classify(s);
        if let Some(m) = metrics {
            m.drift_checks.with_label_values(&[endpoint]).inc();
        }
        if let DriftVerdict::Mismatch(cause) = verdict {
            if let Some(m) = metrics {
                m.record_drift_mismatch(endpoint, cause.as_str());
            }
            let due = st.last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY);
            if st.last_cause != Some(cause) || due {
                tracing::warn!(
                    endpoint, cause = cause.as_str(), published_block_size = s.block_size,
                    configured_block_size = self.config.block_size, algo = %self.config.algo,
                    "KV block hashes do not match the configured vLLM hashing"
                );
                st.last_log = Some(Instant::now());
            }
            st.last_cause = Some(cause);
        } else {
            st.last_cause = None;
        }
        verdict
    }

    /// Forgets an endpoint.
    pub fn forget(&self, endpoint: &str) {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::decode::decode_batch;
    use crate::kvcache::events::KvEvent;

    fn prefill() -> BlockStored {
        let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kv_events/events/01_stored_prefill_u64.bin");
        let b = decode_batch(&std::fs::read(p).expect("fixture")).expect("decodes");
        match b.events.into_iter().next() {
            Some(KvEvent::BlockStored(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    fn detector(algo: HashAlgo, seed: Option<&str>, bs: usize) -> DriftDetector {
        DriftDetector::try_new(DriftConfig {
            algo,
            pythonhashseed: seed.map(str::to_owned),
            block_size: bs,
            vllm_version: VllmVersion::CURRENT,
            sample_every: 1,
        })
        .expect("detector")
    }

    #[test]
    fn verifies_and_diagnoses_vector_01() {
        // 01 was produced with sha256, PYTHONHASHSEED unset, block size 16.
        let s = prefill();
        let m = KvCacheMetrics::register(&prometheus::Registry::new()).expect("metrics");
        assert_eq!(detector(HashAlgo::Sha256, None, 16).observe("a", &s, Some(&m)), DriftVerdict::Match);
        assert_eq!(m.endpoint_block_size.with_label_values(&["a"]).get(), 16);
        assert_eq!(
            detector(HashAlgo::Sha256, None, 64).observe("a", &s, None),
            DriftVerdict::Mismatch(DriftCause::BlockSize)
        );
        assert_eq!(
            detector(HashAlgo::Sha256Cbor, None, 16).observe("a", &s, None),
            DriftVerdict::Mismatch(DriftCause::Algorithm)
        );
        let d = detector(HashAlgo::Sha256, Some("42"), 16);
        assert_eq!(d.observe("a", &s, Some(&m)), DriftVerdict::Mismatch(DriftCause::HashSeed));
        assert_eq!(m.drift_mismatches.with_label_values(&["a", "hash_seed"]).get(), 1);
        let mut cont = s.clone();
        cont.parent_block_hash = Some(1);
        assert_eq!(d.observe("a", &cont, None), DriftVerdict::Skipped);
    }
}
