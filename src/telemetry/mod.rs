//! Telemetry: log/trace subscriber setup (`tracing`), request-level Prometheus metrics
//! (`metrics`), dual-named metric families (`twin`), capped label values (`labels`) and the admin HTTP server (`admin`).

pub mod admin;
pub mod labels;
pub mod metrics;
pub mod tracing;
pub mod twin;
