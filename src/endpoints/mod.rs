//! Model-server endpoints: turning what a pod reports about itself into typed load data.
//!
//! [`prom_text`] parses the Prometheus text exposition format generically, [`metric_spec`]
//! parses configured metric selectors, and [`vllm_metrics`] alone knows engine metric names
//! and maps samples to [`vllm_metrics::PodMetrics`].
pub mod metric_spec;
pub mod prom_text;
pub mod vllm_metrics;
