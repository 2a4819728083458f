//! Validated Flow Control settings (built from the `flowControl` block by
//! `config::flow_control`): global limits, the request TTL, per-priority bands with their
//! fairness and ordering policies, and the usage ceiling. Plain data, no behaviour beyond
//! looking up the band of a priority.

use std::sync::Arc;
use std::time::Duration;

use super::policy::FairnessPolicy;

/// Per-band `maxBytes` when the config sets none (1 GB, as GIE).
pub const DEFAULT_BAND_MAX_BYTES: u64 = 1_000_000_000;

/// Which flow a band serves next.
#[derive(Clone, Debug, Default)]
pub enum Fairness {
    /// `global-strict-fairness-policy`: the best head across all flows of the band, as if
    /// they were one queue.
    #[default]
    GlobalStrict,
    /// `round-robin-fairness-policy`: flows take turns, one request each.
    RoundRobin,
    /// A stateful policy plugin (`program-aware-fairness`): it picks among the band's
    /// non-empty flows and hears about every dispatch.
    Policy(Arc<dyn FairnessPolicy>),
}

impl PartialEq for Fairness {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::GlobalStrict, Self::GlobalStrict) | (Self::RoundRobin, Self::RoundRobin) => true,
            // The same plugin instance.
            (Self::Policy(a), Self::Policy(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Which request of a flow (and, under global-strict fairness, of the band) goes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ordering {
    /// `fcfs-ordering-policy`: arrival order.
    #[default]
    Fcfs,
    /// `edf-ordering-policy`: earliest deadline (arrival + TTL) first; requests without a
    /// deadline go last, in arrival order.
    Edf,
    /// `slo-deadline-ordering-policy`: earliest SLO deadline (arrival + the request's TTFT
    /// SLO header) first; requests without a valid SLO go last, in arrival order.
    SloDeadline,
}

/// One priority band.
#[derive(Clone, Debug, PartialEq)]
pub struct BandSettings {
    /// Queued bytes allowed in the band (`None` = unlimited).
    pub max_bytes: Option<u64>,
    /// Queued requests allowed in the band (`None` = unlimited).
    pub max_requests: Option<u64>,
    /// Band-specific TTL (`None` = the global `defaultRequestTTL`).
    pub ttl: Option<Duration>,
    /// Fairness policy.
    pub fairness: Fairness,
    /// Ordering policy.
    pub ordering: Ordering,
}

impl Default for BandSettings {
    fn default() -> Self {
        Self {
            max_bytes: Some(DEFAULT_BAND_MAX_BYTES),
            max_requests: None,
            ttl: None,
            fairness: Fairness::default(),
            ordering: Ordering::default(),
        }
    }
}

/// The whole `flowControl` block, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowControlSettings {
    /// Queued bytes allowed over all bands (`None` = unlimited).
    pub max_bytes: Option<u64>,
    /// Queued requests allowed over all bands (`None` = unlimited).
    pub max_requests: Option<u64>,
    /// How long a request may wait in the queue (`None` = until the client gives up).
    pub default_ttl: Option<Duration>,
    /// How long a request arriving at an empty pool waits for an endpoint
    /// (`noEndpointRequestTTL`; `None` = rejected at once).
    pub no_endpoint_ttl: Option<Duration>,
    /// Template for priorities without their own band.
    pub default_band: BandSettings,
    /// Template for negative priorities without their own band (llm-d); `None` = the
    /// default band.
    pub default_negative_band: Option<BandSettings>,
    /// Configured bands by priority.
    pub bands: Vec<(i32, BandSettings)>,
    /// Saturation at or above which dispatch holds (`static-usage-limit-policy`
    /// `threshold`, 1.0 by default; the same for every priority).
    pub ceiling: f64,
}

impl Default for FlowControlSettings {
    fn default() -> Self {
        Self {
            max_bytes: None,
            max_requests: None,
            default_ttl: None,
            no_endpoint_ttl: None,
            default_band: BandSettings::default(),
            default_negative_band: None,
            bands: Vec::new(),
            ceiling: 1.0,
        }
    }
}

impl FlowControlSettings {
    /// The band settings that apply to `priority`.
    pub fn band(&self, priority: i32) -> &BandSettings {
        if let Some((_, b)) = self.bands.iter().find(|(p, _)| *p == priority) {
            return b;
        }
        match &self.default_negative_band {
            Some(b) if priority < 0 => b,
            _ => &self.default_band,
        }
    }

    /// The TTL of a request of `priority`.
    pub fn ttl(&self, priority: i32) -> Option<Duration> {
        self.band(priority).ttl.or(self.default_ttl)
    }
}
