//! Endpoints: where the pod list comes from (`discovery`), the atomically swapped list with
//! per-endpoint metrics cells (`store`), the model the scheduler reads (`model`), the
//! polling scrapers (`scraper`) and the Prometheus-text extraction (`vllm_metrics`).

pub mod discovery;
pub mod model;
pub mod scraper;
pub mod store;
pub mod vllm_metrics;
