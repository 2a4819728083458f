//! Telemetry: log/trace subscriber setup (`tracing`), request-level Prometheus metrics
//! (`metrics`), dual-named metric families (`twin`) and the admin HTTP server (`admin`).

pub mod admin;
pub mod metrics;
pub mod tracing;
pub mod twin;
