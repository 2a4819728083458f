//! Endpoints: where the pod list comes from (`discovery`), the atomically swapped list with
//! per-endpoint metrics cells (`store`), the model the scheduler reads (`model`), the
//! polling scrapers (`scraper`), the `/v1/models` pollers (`served_models`), what both pollers
//! share (`poll`), and turning
//! what a pod reports about itself into typed load data: [`prom_text`] parses the Prometheus text exposition generically, [`metric_spec`]
//! parses configured metric selectors, and [`vllm_metrics`] alone knows engine metric names.

pub mod discovery;
pub mod metric_spec;
pub mod model;
pub mod poll;
pub mod prom_text;
pub mod scraper;
pub mod served_models;
pub mod store;
pub mod vllm_metrics;
