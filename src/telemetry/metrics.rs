//! Request-level metrics with the Go EPPs' names (GIE `inference_objective_*` and the llm-d
//! `llm_d_epp_*` twins): requests and errors by model, latency, sizes, tokens, running
//! requests, plus `inference_extension_info`. Label values are bounded: model names are
//! folded to `other` beyond a cap.

use prometheus::{IntGaugeVec, Opts, Registry};

use super::labels::BoundedLabels;
use super::twin::{
    GENERAL_BUCKETS, OUTPUT_TOKEN_BUCKETS, TOKEN_BUCKETS, TwinCounterVec, TwinGaugeVec, TwinHistogramVec, size_buckets,
};

/// Distinct model names kept as label values before folding to `other`.
const MODEL_LABEL_CAP: usize = 1000;

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
        })
    }

    /// Folds a model name to a bounded label value.
    fn model_label(&self, model: &str) -> String {
        self.models.get(model)
    }

    /// A request was scheduled.
    pub fn scheduled(&self, model: &str, target: &str, body_bytes: usize) {
        let (m, t) = (self.model_label(model), self.model_label(target));
        self.requests.with(&[&m, &t]).inc();
        self.request_sizes.with(&[&m, &t]).observe(body_bytes as f64);
        self.running.with(&[&m]).add(1.0);
    }

    /// A scheduled request's stream ended.
    pub fn finished(&self, model: &str, target: &str, seconds: f64, usage: Option<&crate::request::usage::Usage>) {
        let (m, t) = (self.model_label(model), self.model_label(target));
        self.running.with(&[&m]).add(-1.0);
        self.duration.with(&[&m, &t]).observe(seconds);
        if let Some(u) = usage {
            if u.prompt_tokens > 0 {
                self.input_tokens.with(&[&m, &t]).observe(u.prompt_tokens as f64);
            }
            if u.completion_tokens > 0 {
                self.output_tokens.with(&[&m, &t]).observe(u.completion_tokens as f64);
            }
            if let Some(c) = u.cached_tokens {
                self.cached_tokens.with(&[&m, &t]).observe(c as f64);
            }
        }
    }

    /// A request failed with `code` (`BadRequest`, `ResourceExhausted`, ...).
    pub fn error(&self, model: &str, target: &str, code: &str) {
        let (m, t) = (self.model_label(model), self.model_label(target));
        self.errors.with(&[&m, &t, code]).inc();
    }
}
