//! `probabilistic-admitter` (llm-d): sheds sheddable requests (priority < 0) with a
//! probability that rises steeply with the pool's saturation, so lower-priority traffic backs
//! off gradually before the pool is full; requests with priority >= 0 are always admitted.
//!
//! `saturation = mean over candidates of max(waiting / queueDepthThreshold, kvUsage /
//! kvCacheUtilThreshold)` (a never-scraped candidate counts 1.0), and the request is denied
//! with probability `p = min(saturation^power * k, 1)`. With the defaults the curve is nearly
//! flat up to 0.1 (p < 0.01 %), p ~ 2.3 % at 0.15, 73 % at 0.3 and 100 % from ~0.32. No
//! candidates -> admit. Denial reason: `probabilistic-admitter: rejected, saturation=<s>
//! prob=<p>`.
//!
//! Parameters: `queueDepthThreshold` (5, integer > 0), `kvCacheUtilThreshold` (0.8, > 0),
//! `power` (5.0, > 0), `k` (300.0, > 0).

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Admitter, PluginInstance};

/// Type name.
pub const TYPE: &str = "probabilistic-admitter";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Waiting requests at which an endpoint's queue contribution reaches 1.0.
    pub queue_depth_threshold: i64,
    /// KV-cache usage (0..1) at which an endpoint's KV contribution reaches 1.0.
    pub kv_cache_util_threshold: f64,
    /// Exponent of the shedding curve.
    pub power: f64,
    /// Scale of the shedding curve (100 % shed at `saturation = (1/k)^(1/power)`).
    pub k: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { queue_depth_threshold: 5, kv_cache_util_threshold: 0.8, power: 5.0, k: 300.0 }
    }
}

/// The admitter.
#[derive(Debug)]
pub struct ProbabilisticAdmitter {
    queue_depth: f64,
    kv_util: f64,
    power: f64,
    k: f64,
    /// Draws in [0, 1); a mutex so tests can seed it (one draw per sheddable request).
    rng: Mutex<StdRng>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let a = Arc::new(
        ProbabilisticAdmitter::new(&p, StdRng::from_os_rng())
            .map_err(|(key, msg)| BuildError::new(format!("{}.parameters.{key}", spec.path), msg))?,
    );
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_admitter(a))
}

impl ProbabilisticAdmitter {
    /// An admitter drawing from `rng`; `Err((parameter, message))` for an out-of-range value.
    pub fn new(p: &Params, rng: StdRng) -> Result<Self, (&'static str, &'static str)> {
        let positive = |v: f64| v > 0.0 && v.is_finite();
        if p.queue_depth_threshold <= 0 {
            return Err(("queueDepthThreshold", "must be > 0"));
        }
        for (key, v) in [("kvCacheUtilThreshold", p.kv_cache_util_threshold), ("power", p.power), ("k", p.k)] {
            if !positive(v) {
                return Err((key, "must be a finite number > 0"));
            }
        }
        Ok(Self {
            queue_depth: p.queue_depth_threshold as f64,
            kv_util: p.kv_cache_util_threshold,
            power: p.power,
            k: p.k,
            rng: Mutex::new(rng),
        })
    }

    /// Mean per-candidate saturation (see the module docs); 0 for no candidates.
    pub fn saturation(&self, candidates: &[Candidate]) -> f64 {
        if candidates.is_empty() {
            return 0.0;
        }
        let total: f64 = candidates
            .iter()
            .map(|c| {
                if !c.metrics_known {
                    return 1.0;
                }
                let m = &c.metrics.metrics;
                let v = (m.waiting_queue_size as f64 / self.queue_depth).max(m.kv_cache_usage / self.kv_util);
                if v.is_finite() { v.max(0.0) } else { 1.0 }
            })
            .sum();
        total / candidates.len() as f64
    }

    /// Shedding probability at `saturation`.
    pub fn probability(&self, saturation: f64) -> f64 {
        (saturation.powf(self.power) * self.k).clamp(0.0, 1.0)
    }
}

impl Admitter for ProbabilisticAdmitter {
    fn admit(&self, _: &SchedulingContext<'_>, priority: i32, candidates: &[Candidate]) -> Result<(), String> {
        if priority >= 0 || candidates.is_empty() {
            return Ok(());
        }
        let saturation = self.saturation(candidates);
        let p = self.probability(saturation);
        let draw: f64 = self.rng.lock().unwrap_or_else(|e| e.into_inner()).random();
        if draw < p {
            return Err(format!("probabilistic-admitter: rejected, saturation={saturation:.3} prob={p:.2}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::RequestData;
    use crate::request::InferenceRequest;
    use crate::test_util::endpoint;

    fn seeded(p: &Params) -> ProbabilisticAdmitter {
        ProbabilisticAdmitter::new(p, StdRng::seed_from_u64(7)).expect("valid")
    }

    fn rejections(a: &ProbabilisticAdmitter, priority: i32, candidates: &[Candidate], n: usize) -> usize {
        let (r, d) = (InferenceRequest::default(), RequestData::default());
        let cx = SchedulingContext { request: &r, data: &d, now: tokio::time::Instant::now() };
        (0..n).filter(|_| a.admit(&cx, priority, candidates).is_err()).count()
    }

    #[test]
    fn saturation_is_the_mean_of_the_worse_ratio_per_endpoint() {
        let a = seeded(&Params::default());
        let pods = [
            endpoint("a").waiting(5).kv_usage(0.4).build(), // queue 1.0, kv 0.5 -> 1.0
            endpoint("b").waiting(0).kv_usage(0.4).build(), // kv 0.5
            endpoint("c").fresh(false).build(),             // never scraped -> 1.0
            endpoint("d").waiting(1).kv_usage(0.08).build(), // queue 0.2, kv 0.1 -> 0.2
        ];
        assert!((a.saturation(&pods) - 2.7 / 4.0).abs() < 1e-12);
        assert_eq!(a.saturation(&[]), 0.0);
        assert!((a.probability(0.15) - 0.0228).abs() < 1e-3, "documented onset");
        assert_eq!(a.probability(0.34), 1.0);
        assert_eq!(a.probability(0.0), 0.0);
    }

    #[test]
    fn sheds_sheddable_requests_at_the_curve_rate_and_never_others() {
        // power 1, k 1: p = saturation; 0.5 saturation = a fair coin.
        let a = seeded(&Params { power: 1.0, k: 1.0, ..Params::default() });
        let half = [endpoint("a").waiting(0).kv_usage(0.4).build()];
        let n = 10_000;
        let shed = rejections(&a, -1, &half, n);
        // Seeded, so deterministic; the bound is ~10 sigma wide for a fair coin.
        assert!((4_500..=5_500).contains(&shed), "{shed} of {n} shed at p = 0.5");
        assert_eq!(rejections(&a, 0, &half, 1_000), 0, "priority 0 is never shed");
        let full = [endpoint("a").waiting(50).build()];
        assert_eq!(rejections(&a, -2, &full, 1_000), 1_000, "p = 1 sheds all");
        let idle = [endpoint("a").build()];
        assert_eq!(rejections(&a, -1, &idle, 1_000), 0, "p = 0 sheds none");
        assert_eq!(rejections(&a, -1, &[], 10), 0, "no candidates: admit");
    }

    #[test]
    fn parameters_are_strict_and_checked() {
        let err = |v: serde_json::Value| {
            let spec =
                PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters: v, path: "plugins[1]".into() };
            build(&spec, &BuildContext::default()).map(|_| ()).unwrap_err().path
        };
        assert_eq!(err(serde_json::json!({"queueDepthThreshold": 0})), "plugins[1].parameters.queueDepthThreshold");
        assert_eq!(err(serde_json::json!({"queueDepthThreshold": 2.5})), "plugins[1].parameters");
        assert_eq!(err(serde_json::json!({"kvCacheUtilThreshold": -1})), "plugins[1].parameters.kvCacheUtilThreshold");
        assert_eq!(err(serde_json::json!({"power": 0})), "plugins[1].parameters.power");
        assert_eq!(err(serde_json::json!({"k": 0})), "plugins[1].parameters.k");
        assert_eq!(err(serde_json::json!({"K": 1})), "plugins[1].parameters");
        let spec = PluginSpec {
            name: TYPE.into(),
            type_name: TYPE.into(),
            parameters: serde_json::json!({"queueDepthThreshold": 10, "kvCacheUtilThreshold": 0.9, "power": 3, "k": 100}),
            path: "plugins[1]".into(),
        };
        assert!(build(&spec, &BuildContext::default()).expect("valid").admitter.is_some());
    }
}
