//! Telemetry: log/trace subscriber setup (`tracing`), OpenTelemetry spans and export (`otel`), request-level Prometheus metrics
//! (`metrics`), dual-named metric families (`twin`) and which half `/metrics` exports
//! (`naming`), capped label values (`labels`), GIE's pool gauges (`pool_gauges`), process
//! metrics (`process`), the admin HTTP server (`admin`) and its `/debug/pprof/` (`profiling`).

pub mod admin;
pub mod labels;
pub mod metrics;
pub mod naming;
pub mod otel;
pub mod pool_gauges;
pub mod process;
pub mod profiling;
pub mod tracing;
pub mod twin;
