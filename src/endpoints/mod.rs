//! Model-server endpoints: turning what a pod reports about itself into typed load data.
//!
//! [`prom_text`] parses the Prometheus text exposition format generically; [`vllm_metrics`]
//! alone knows engine metric names and maps samples to [`vllm_metrics::PodMetrics`].
pub mod prom_text;
pub mod vllm_metrics;
