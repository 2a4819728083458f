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
pub mod policy;
pub mod program_metrics;
pub mod queue;
pub mod settings;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use controller::{FlowController, FlowRequest};

use crate::latency::features::SLO_TTFT_HEADERS;
use crate::request::headers::RequestHeaders;

/// Fairness id of requests that carry none.
pub const DEFAULT_FLOW: &str = "default-flow";

/// The TTFT SLO `slo-deadline-ordering-policy` orders by: the first non-empty of
/// `x-slo-ttft-ms` (GIE) / `x-llm-d-slo-ttft-ms` (llm-d) as a whole non-negative number of
/// milliseconds (as the reference parses it); anything else = no SLO.
pub fn slo_ttft(headers: &RequestHeaders) -> Option<Duration> {
    let ms: u64 = headers.get_any(SLO_TTFT_HEADERS)?.trim().parse().ok()?;
    Some(Duration::from_millis(ms))
}

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

#[cfg(test)]
mod slo_tests {
    use super::*;

    #[test]
    fn slo_ttft_reads_whole_milliseconds_from_either_header() {
        let h = |k: &str, v: &str| RequestHeaders { all: vec![(k.into(), v.into())] };
        assert_eq!(slo_ttft(&h("x-slo-ttft-ms", " 250 ")), Some(Duration::from_millis(250)));
        assert_eq!(slo_ttft(&h("x-llm-d-slo-ttft-ms", "0")), Some(Duration::ZERO));
        assert_eq!(slo_ttft(&h("x-slo-ttft-ms", "-5")), None);
        assert_eq!(slo_ttft(&h("x-slo-ttft-ms", "2.5")), None, "the reference parses an integer");
        assert_eq!(slo_ttft(&h("x-slo-tpot-ms", "20")), None);
    }
}
