//! Tokenizer metrics: outcomes per backend (misses are what makes a request route without
//! prefix information), latency, and prefix-cache use.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// Which backend produced an outcome (label `backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendLabel {
    /// In-process tokenizer.
    Local,
    /// vLLM render endpoints.
    Vllm,
}

impl BackendLabel {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendLabel::Local => "local",
            BackendLabel::Vllm => "vllm",
        }
    }
}

/// How one tokenize step ended (label `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Token ids produced.
    Ok,
    /// The request carried token ids; passed through.
    Passthrough,
    /// The deadline passed; the request is routed without tokens.
    Timeout,
    /// The backend failed (template error, HTTP error, bad answer).
    Error,
    /// The prompt kind or a request feature is not supported by the backend.
    Unsupported,
    /// No tokenizer configured for the request's model.
    UnknownModel,
}

impl Outcome {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Passthrough => "passthrough",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Unsupported => "unsupported",
            Outcome::UnknownModel => "unknown_model",
        }
    }
}

/// Metric handles (cheap to clone).
#[derive(Clone, Debug)]
pub struct TokenizeMetrics {
    /// `llm_d_epp_tokenize_total{backend, outcome}`.
    pub requests: IntCounterVec,
    /// `llm_d_epp_tokenize_duration_seconds{backend}` (successful tokenizations).
    pub duration: HistogramVec,
    /// `llm_d_epp_tokenize_prefix_cache_total{result}` (`hit` / `miss`), in-process chat only.
    pub prefix_cache: IntCounterVec,
}

impl TokenizeMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "llm_d_epp_tokenize_total",
                "Tokenize steps by backend and outcome; every outcome but ok and passthrough routes the request without tokens.",
            ),
            &["backend", "outcome"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new("llm_d_epp_tokenize_duration_seconds", "Time to produce token ids, queueing included.")
                .buckets(vec![
                    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ]),
            &["backend"],
        )?;
        let prefix_cache = IntCounterVec::new(
            Opts::new(
                "llm_d_epp_tokenize_prefix_cache_total",
                "In-process chat encodings that continued from a cached prefix (hit) or encoded in full (miss).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(prefix_cache.clone()))?;
        Ok(Self { requests, duration, prefix_cache })
    }

    /// Counts one outcome.
    pub fn outcome(&self, backend: BackendLabel, outcome: Outcome) {
        self.requests.with_label_values(&[backend.as_str(), outcome.as_str()]).inc();
    }

    /// Count of one outcome so far (tests, admin).
    pub fn count(&self, backend: BackendLabel, outcome: Outcome) -> u64 {
        self.requests.with_label_values(&[backend.as_str(), outcome.as_str()]).get()
    }
}

impl Default for TokenizeMetrics {
    fn default() -> Self {
        Self::register(&Registry::new()).expect("a fresh registry has no name clashes")
    }
}
