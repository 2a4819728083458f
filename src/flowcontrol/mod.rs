//! Flow Control (feature gate `flowControl`): admission queueing in front of the scheduler,
//! as GIE and llm-d describe it. Each request calls `FlowController::enqueue_and_wait`
//! with its flow key (fairness id, priority); bands are served in strict priority order, the
//! fairness policy picks the flow within a band and the ordering policy the request; a
//! dispatch loop releases requests while the configured saturation detector reports the
//! pool below the usage ceiling. Modules: `settings` (validated config), `queue` (bands,
//! flows, policies; no time or tasks), `controller` (waiting, TTL, cancel, dispatch loop),
//! `metrics` (`flow_control_*` families).

pub mod controller;
pub mod metrics;
pub mod queue;
pub mod settings;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use controller::{FlowController, FlowRequest};

/// Fairness id of requests that carry none.
pub const DEFAULT_FLOW: &str = "default-flow";

/// How a request's admission ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Released to the scheduler.
    Dispatched,
    /// A queue limit was reached (429).
    RejectedCapacity(String),
    /// The pool has no endpoints (503).
    RejectedNoEndpoints,
    /// Waited longer than the TTL (503).
    EvictedTtl(Duration),
    /// The caller went away while waiting.
    EvictedCancelled,
    /// The controller stopped while the request waited (500).
    EvictedOther,
}

impl Outcome {
    /// The `outcome` metric label (GIE / llm-d spelling).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Dispatched => "Dispatched",
            Self::RejectedCapacity(_) => "RejectedCapacity",
            Self::RejectedNoEndpoints => "RejectedNoEndpoints",
            Self::EvictedTtl(_) => "EvictedTTL",
            Self::EvictedCancelled => "EvictedContextCancelled",
            Self::EvictedOther => "EvictedOther",
        }
    }
}
