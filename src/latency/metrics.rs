//! Metrics of the latency-predictor stack: predicted TTFT/TPOT of the chosen endpoint and the
//! duration of prediction calls (GIE `inference_objective_*` names with their llm-d
//! `llm_d_epp_*` twins, labels `model_name, target_model_name`), and epp's own counters of
//! failed prediction calls and training uploads.

use prometheus::{IntCounterVec, Registry};

use crate::telemetry::twin::{GENERAL_BUCKETS, TwinHistogramVec};

/// GIE "TPOT" buckets (seconds).
pub const TPOT_BUCKETS: &[f64] = &[
    0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5,
    2.0, 3.0, 4.5, 6.0, 12.0, 18.0, 24.0, 30.0, 36.0, 48.0, 60.0, 90.0, 120.0, 180.0, 270.0, 360.0,
];

/// GIE "P" buckets: prediction call durations (seconds).
pub const PREDICTION_BUCKETS: &[f64] =
    &[0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];

/// The families.
#[derive(Clone, Debug)]
pub struct LatencyMetrics {
    /// Predicted TTFT of the chosen endpoint.
    pub predicted_ttft: TwinHistogramVec,
    /// Predicted TPOT of the chosen endpoint.
    pub predicted_tpot: TwinHistogramVec,
    /// Duration of the prediction call that produced the TTFT predictions.
    pub ttft_prediction_duration: TwinHistogramVec,
    /// Duration of the prediction call that produced the TPOT predictions (the same bulk call).
    pub tpot_prediction_duration: TwinHistogramVec,
    /// `epp_latency_prediction_errors_total{reason}`: calls that gave no predictions.
    pub prediction_errors: IntCounterVec,
    /// `epp_latency_training_samples_total{outcome}`: `sent`, `failed`, `dropped`.
    pub training_samples: IntCounterVec,
}

impl LatencyMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let labels = &["model_name", "target_model_name"];
        let hist = |gie: &str, llmd: &str, help: &str, buckets: &[f64]| {
            TwinHistogramVec::register(registry, gie, llmd, help, buckets, labels)
        };
        let counter = |name: &str, help: &str, label: &str| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(prometheus::Opts::new(name, help), &[label])?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Self {
            predicted_ttft: hist(
                "inference_objective_request_predicted_ttft_seconds",
                "llm_d_epp_request_predicted_ttft_seconds",
                "Predicted time to first token of the chosen endpoint.",
                GENERAL_BUCKETS,
            )?,
            predicted_tpot: hist(
                "inference_objective_request_predicted_tpot_seconds",
                "llm_d_epp_request_predicted_tpot_seconds",
                "Predicted time per output token of the chosen endpoint.",
                TPOT_BUCKETS,
            )?,
            ttft_prediction_duration: hist(
                "inference_objective_request_ttft_prediction_duration_seconds",
                "llm_d_epp_request_ttft_prediction_duration_seconds",
                "Duration of the TTFT prediction call.",
                PREDICTION_BUCKETS,
            )?,
            tpot_prediction_duration: hist(
                "inference_objective_request_tpot_prediction_duration_seconds",
                "llm_d_epp_request_tpot_prediction_duration_seconds",
                "Duration of the TPOT prediction call.",
                PREDICTION_BUCKETS,
            )?,
            prediction_errors: counter(
                "epp_latency_prediction_errors_total",
                "Prediction calls that produced no predictions (the request is still routed).",
                "reason",
            )?,
            training_samples: counter(
                "epp_latency_training_samples_total",
                "Training samples by outcome (sent, failed, dropped).",
                "outcome",
            )?,
        })
    }
}
