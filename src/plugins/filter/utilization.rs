//! `utilization-detector`: the saturation detector (and, when placed in a profile, a filter).
//! Saturation of a candidate set = mean of `max(queue / queueDepthThreshold,
//! kv / kvCacheUtilThreshold)`, where an endpoint with stale or missing metrics counts 1.0.
//! As a filter it keeps endpoints with fresh metrics and `queue < queueThr x (1 + headroom)`
//! and `kv < kvThr x (1 + headroom)`; when none qualify it returns the input (fail-open).
//! Parameters: `queueDepthThreshold` (5, > 0), `kvCacheUtilThreshold` (0.8, in (0,1]),
//! `metricsStalenessThreshold` (200ms), `headroom` (0.0, >= 0).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, de_duration, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance, SaturationDetector};

/// Type name.
pub const TYPE: &str = "utilization-detector";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Waiting-queue threshold.
    pub queue_depth_threshold: i64,
    /// KV utilisation threshold (fraction).
    pub kv_cache_util_threshold: f64,
    /// Age after which metrics are stale.
    #[serde(deserialize_with = "de_duration")]
    pub metrics_staleness_threshold: Duration,
    /// Extra allowance over the thresholds.
    pub headroom: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            queue_depth_threshold: 5,
            kv_cache_util_threshold: 0.8,
            metrics_staleness_threshold: Duration::from_millis(200),
            headroom: 0.0,
        }
    }
}

/// The detector.
#[derive(Debug, Clone)]
pub struct UtilizationDetector {
    queue_threshold: f64,
    kv_threshold: f64,
    staleness: Duration,
    headroom: f64,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    if p.queue_depth_threshold <= 0 {
        return Err(BuildError::new(at("queueDepthThreshold"), "must be > 0"));
    }
    if !(p.kv_cache_util_threshold > 0.0 && p.kv_cache_util_threshold <= 1.0) {
        return Err(BuildError::new(at("kvCacheUtilThreshold"), "must be within (0, 1]"));
    }
    if p.metrics_staleness_threshold.is_zero() {
        return Err(BuildError::new(at("metricsStalenessThreshold"), "must be > 0"));
    }
    if p.headroom.is_nan() || p.headroom < 0.0 {
        return Err(BuildError::new(at("headroom"), "must be >= 0"));
    }
    let detector = UtilizationDetector {
        queue_threshold: p.queue_depth_threshold as f64,
        kv_threshold: p.kv_cache_util_threshold,
        staleness: p.metrics_staleness_threshold,
        headroom: p.headroom,
    };
    let detector = Arc::new(detector);
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(detector.clone()).with_saturation(detector))
}

impl SaturationDetector for UtilizationDetector {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64 {
        if candidates.is_empty() {
            return 1.0;
        }
        let sum: f64 = candidates
            .iter()
            .map(|c| {
                if !c.metrics_known || c.metrics.is_stale(now, self.staleness) {
                    return 1.0;
                }
                let m = &c.metrics.metrics;
                (m.waiting_queue_size as f64 / self.queue_threshold).max(m.kv_cache_usage / self.kv_threshold)
            })
            .sum();
        sum / candidates.len() as f64
    }
}

impl UtilizationDetector {
    fn has_capacity(&self, c: &Candidate, now: Instant) -> bool {
        let m = &c.metrics.metrics;
        crate::plugins::load::keeps_known(c)
            && !c.metrics.is_stale(now, self.staleness)
            && (m.waiting_queue_size as f64) < self.queue_threshold * (1.0 + self.headroom)
            && m.kv_cache_usage < self.kv_threshold * (1.0 + self.headroom)
    }
}

impl Filter for UtilizationDetector {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let kept: Vec<Candidate> = candidates.iter().filter(|c| self.has_capacity(c, cx.now)).cloned().collect();
        if kept.is_empty() { candidates } else { kept }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    fn detector() -> UtilizationDetector {
        UtilizationDetector {
            queue_threshold: 5.0,
            kv_threshold: 0.8,
            staleness: Duration::from_millis(200),
            headroom: 0.0,
        }
    }

    #[test]
    fn filters_busy_and_stale_but_fails_open() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let c = vec![
            endpoint("ok").waiting(1).kv_usage(0.2).build(),
            endpoint("busy").waiting(9).build(),
            endpoint("full").kv_usage(0.9).build(),
            endpoint("stale").fresh(false).build(),
        ];
        let kept: Vec<_> = detector().filter(&cx, c).iter().map(|c| c.id().to_string()).collect();
        assert_eq!(kept, ["ok"]);
        let all_busy = vec![endpoint("busy").waiting(9).build()];
        assert_eq!(detector().filter(&cx, all_busy).len(), 1);
    }

    #[test]
    fn saturation_is_the_mean_with_stale_as_one() {
        let now = Instant::now();
        let c = vec![endpoint("a").waiting(5).build(), endpoint("b").fresh(false).build()];
        assert!((detector().saturation(&c, now) - 1.0).abs() < 1e-9);
        let c = vec![endpoint("a").waiting(0).kv_usage(0.4).build()];
        assert!((detector().saturation(&c, now) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn contract() {
        super::super::contract::check(&detector());
    }
}
