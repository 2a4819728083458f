//! Stateful Flow Control fairness policies (the stateless `global-strict-fairness-policy`
//! and `round-robin-fairness-policy` are built into `flowcontrol::queue`).
//!
//! - `program_aware`: `program-aware-fairness` (llm-d), the plugin: parameters, lifecycle
//!   hooks (dispatch, pre-request, response completion), eviction of idle programs.
//! - `las`: its Least-Attained-Service bookkeeping and scoring (pure, no locks or clocks).
//! - `metrics`: the `llm_d_epp_program_aware_*` gauges.

pub mod las;
// The gauges live with Flow Control so `framework::build::PluginMetrics` can hold them.
pub use crate::flowcontrol::program_metrics as metrics;
pub mod program_aware;
