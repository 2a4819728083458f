//! Request-level metrics with the Go EPPs' names (GIE `inference_objective_*` and the llm-d
//! `llm_d_epp_*` twins): requests and errors by model, latency, sizes, tokens, running
//! requests, plus `inference_extension_info`. Label values are bounded: model names are
//! folded to `other` beyond a cap.
//!
//! Every request touches the same few series of its (model, target model) pair; they are
//! resolved once and kept in a bounded cache, so a request costs a map lookup instead of a
//! label fold (a lock and two `String`s) and ten `with_label_values` (SipHash of the labels
//! and a lock each). Series are never removed, so cached handles stay the registered ones.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use prometheus::{IntGaugeVec, Opts, Registry};

use super::labels::BoundedLabels;
use super::twin::{
    GENERAL_BUCKETS, OUTPUT_TOKEN_BUCKETS, TOKEN_BUCKETS, TwinCounter, TwinCounterVec, TwinGauge, TwinGaugeVec,
    TwinHistogram, TwinHistogramVec, size_buckets,
};

/// Distinct model names kept as label values before folding to `other`.
const MODEL_LABEL_CAP: usize = 1000;

/// (model, target model) pairs whose series are cached; pairs beyond it resolve per call.
/// Model names are client input (at most `MAX_MODEL_NAME_BYTES`, 1 KiB, each), so the cache
/// holds at most about 4,096 x 2.5 KiB = 10 MiB whatever the clients send.
const PAIR_CACHE_CAP: usize = 4096;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Raw model name -> raw target model name -> the pair's series (folded labels inside).
type PairCache = FastMap<Box<str>, FastMap<Box<str>, Arc<PairSeries>>>;

/// The series of one (model, target model) pair. The histograms of finished requests are
/// resolved on first use, so the exposition is what it was without the cache: no empty
/// duration series while the pair's first request is in flight, no token series for a pair
/// without usage reports.
#[derive(Debug)]
struct PairSeries {
    model: String,
    target: String,
    requests: TwinCounter,
    sizes: TwinHistogram,
    duration: OnceLock<TwinHistogram>,
    running: TwinGauge,
    input_tokens: OnceLock<TwinHistogram>,
    output_tokens: OnceLock<TwinHistogram>,
    cached_tokens: OnceLock<TwinHistogram>,
}

/// Request-level metric handles.
#[derive(Debug)]
pub struct RequestMetrics {
    requests: TwinCounterVec,
    errors: TwinCounterVec,
    duration: TwinHistogramVec,
    request_sizes: TwinHistogramVec,
    input_tokens: TwinHistogramVec,
    output_tokens: TwinHistogramVec,
    cached_tokens: TwinHistogramVec,
    running: TwinGaugeVec,
    models: BoundedLabels,
    pairs: RwLock<PairCache>,
    cached_pairs: std::sync::atomic::AtomicUsize,
}

impl RequestMetrics {
    /// Registers the families (and `inference_extension_info`).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let labels = &["model_name", "target_model_name"];
        let info = IntGaugeVec::new(
            Opts::new("inference_extension_info", "General information about the running EPP."),
            &["commit", "build_ref"],
        )?;
        registry.register(Box::new(info.clone()))?;
        info.with_label_values(&[env!("CARGO_PKG_VERSION"), "epp"]).set(1);
        Ok(Self {
            requests: TwinCounterVec::register(
                registry,
                "inference_objective_request_total",
                "llm_d_epp_request_total",
                "Requests scheduled.",
                labels,
            )?,
            errors: TwinCounterVec::register(
                registry,
                "inference_objective_request_error_total",
                "llm_d_epp_request_error_total",
                "Requests that failed, by error code.",
                &["model_name", "target_model_name", "error_code"],
            )?,
            duration: TwinHistogramVec::register(
                registry,
                "inference_objective_request_duration_seconds",
                "llm_d_epp_request_duration_seconds",
                "Request headers received to response end of stream, in seconds.",
                GENERAL_BUCKETS,
                labels,
            )?,
            request_sizes: TwinHistogramVec::register(
                registry,
                "inference_objective_request_sizes",
                "llm_d_epp_request_size_bytes",
                "Request body sizes in bytes.",
                &size_buckets(),
                labels,
            )?,
            input_tokens: TwinHistogramVec::register(
                registry,
                "inference_objective_input_tokens",
                "llm_d_epp_request_input_tokens",
                "Prompt tokens reported by the model server.",
                TOKEN_BUCKETS,
                labels,
            )?,
            output_tokens: TwinHistogramVec::register(
                registry,
                "inference_objective_output_tokens",
                "llm_d_epp_request_output_tokens",
                "Completion tokens reported by the model server.",
                OUTPUT_TOKEN_BUCKETS,
                labels,
            )?,
            cached_tokens: TwinHistogramVec::register(
                registry,
                "inference_objective_prompt_cached_tokens",
                "llm_d_epp_request_cached_tokens",
                "Prompt tokens served from the prefix cache.",
                TOKEN_BUCKETS,
                labels,
            )?,
            running: TwinGaugeVec::register(
                registry,
                "inference_objective_running_requests",
                "llm_d_epp_request_running",
                "Requests in flight.",
                &["model_name"],
            )?,
            models: BoundedLabels::new(MODEL_LABEL_CAP),
            pairs: RwLock::default(),
            cached_pairs: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The series of (`model`, `target`): cached, or resolved (and cached while below the cap).
    fn pair(&self, model: &str, target: &str) -> Arc<PairSeries> {
        {
            let pairs = self.pairs.read().unwrap_or_else(|p| p.into_inner());
            if let Some(series) = pairs.get(model).and_then(|targets| targets.get(target)) {
                return series.clone();
            }
        }
        let (m, t) = (self.model_label(model), self.model_label(target));
        let series = Arc::new(PairSeries {
            requests: self.requests.with(&[&m, &t]),
            sizes: self.request_sizes.with(&[&m, &t]),
            duration: OnceLock::new(),
            running: self.running.with(&[&m]),
            input_tokens: OnceLock::new(),
            output_tokens: OnceLock::new(),
            cached_tokens: OnceLock::new(),
            model: m,
            target: t,
        });
        use std::sync::atomic::Ordering::Relaxed;
        if self.cached_pairs.load(Relaxed) < PAIR_CACHE_CAP {
            let mut pairs = self.pairs.write().unwrap_or_else(|p| p.into_inner());
            let targets = pairs.entry(model.into()).or_default();
            if !targets.contains_key(target) {
                targets.insert(target.into(), series.clone());
                self.cached_pairs.fetch_add(1, Relaxed);
            }
        }
        series
    }

    /// Folds a model name to a bounded label value.
    fn model_label(&self, model: &str) -> String {
        self.models.get(model)
    }

    /// A request was scheduled.
    pub fn scheduled(&self, model: &str, target: &str, body_bytes: usize) {
        let series = self.pair(model, target);
        series.requests.inc();
        series.sizes.observe(body_bytes as f64);
        series.running.add(1.0);
    }

    /// A scheduled request's stream ended.
    pub fn finished(&self, model: &str, target: &str, seconds: f64, usage: Option<&crate::request::usage::Usage>) {
        let series = self.pair(model, target);
        series.running.add(-1.0);
        let labels = [series.model.as_str(), series.target.as_str()];
        series.duration.get_or_init(|| self.duration.with(&labels)).observe(seconds);
        if let Some(u) = usage {
            if u.prompt_tokens > 0 {
                series.input_tokens.get_or_init(|| self.input_tokens.with(&labels)).observe(u.prompt_tokens as f64);
            }
            if u.completion_tokens > 0 {
                series
                    .output_tokens
                    .get_or_init(|| self.output_tokens.with(&labels))
                    .observe(u.completion_tokens as f64);
            }
            if let Some(c) = u.cached_tokens {
                series.cached_tokens.get_or_init(|| self.cached_tokens.with(&labels)).observe(c as f64);
            }
        }
    }

    /// A request failed with `code` (`BadRequest`, `ResourceExhausted`, ...).
    pub fn error(&self, model: &str, target: &str, code: &str) {
        let (m, t) = (self.model_label(model), self.model_label(target));
        self.errors.with(&[&m, &t, code]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::usage::Usage;

    fn exposition(registry: &Registry) -> String {
        prometheus::TextEncoder::new().encode_to_string(&registry.gather()).expect("encode")
    }

    #[test]
    fn cached_series_count_every_request_under_the_folded_labels() {
        let registry = Registry::new();
        let metrics = RequestMetrics::register(&registry).expect("register");
        for _ in 0..3 {
            metrics.scheduled("m", "", 100);
        }
        let usage = Usage { prompt_tokens: 7, ..Usage::default() };
        metrics.finished("m", "", 0.5, Some(&usage));
        let text = exposition(&registry);
        let pair = "{model_name=\"m\",target_model_name=\"unknown\"}";
        let expected = [
            format!("inference_objective_request_total{pair} 3"),
            format!("llm_d_epp_request_total{pair} 3"),
            "inference_objective_running_requests{model_name=\"m\"} 2".to_string(),
            format!("inference_objective_input_tokens_sum{pair} 7"),
            format!("inference_objective_request_duration_seconds_count{pair} 1"),
        ];
        let missing: Vec<&String> = expected.iter().filter(|line| !text.contains(line.as_str())).collect();
        assert!(missing.is_empty(), "missing {missing:?} in\n{text}");
        assert!(!text.contains("inference_objective_output_tokens"), "no completion tokens were reported");
        metrics.scheduled("early", "early", 1);
        let text = exposition(&registry);
        assert!(
            !text.contains("request_duration_seconds_count{model_name=\"early\""),
            "no duration series before a request ends"
        );
    }

    #[test]
    fn pairs_past_the_cache_cap_still_count() {
        let registry = Registry::new();
        let metrics = RequestMetrics::register(&registry).expect("register");
        let models = PAIR_CACHE_CAP + 4;
        for i in 0..models {
            metrics.scheduled(&format!("m{i}"), "", 1);
        }
        assert_eq!(metrics.cached_pairs.load(std::sync::atomic::Ordering::Relaxed), PAIR_CACHE_CAP);
        metrics.scheduled(&format!("m{}", models - 1), "", 1);
        // m0, "unknown" and m1..m998 took the 1,000 label values; every later model is `other`
        // (and the last one twice).
        let folded = models - (MODEL_LABEL_CAP - 1) + 1;
        let text = exposition(&registry);
        let line =
            format!("inference_objective_request_total{{model_name=\"other\",target_model_name=\"unknown\"}} {folded}");
        assert!(text.contains(&line), "missing {line}");
    }
}
