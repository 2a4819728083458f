//! Data producers: compute per-request facts once, before any profile runs (token ids, prefix
//! matches, in-flight load), and passive data-layer/policy plugins that configs name but the
//! scheduler does not call.

pub mod approx_prefix;
pub mod inflight;
pub mod k8s_notification;
pub mod mm_cache;
pub mod passive;
pub mod precise_prefix;
pub mod predicted_latency;
pub mod prefix_source;
pub mod session_id;
pub mod token;
