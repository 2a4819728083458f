//! Metric families emitted under two names at once: the GIE name and its llm-d canonical
//! twin (`llm_d_epp_*`), as llm-d dual-emits them, so dashboards written for either EPP work.

use prometheus::core::{AtomicU64, Collector, GenericCounter};
use prometheus::{Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// A labelled histogram family registered under two names.
#[derive(Clone, Debug)]
pub struct TwinHistogramVec(HistogramVec, HistogramVec);

/// A labelled counter family registered under two names.
#[derive(Clone, Debug)]
pub struct TwinCounterVec(IntCounterVec, IntCounterVec);

/// A labelled gauge family registered under two names.
#[derive(Clone, Debug)]
pub struct TwinGaugeVec(GaugeVec, GaugeVec);

/// One resolved histogram child of both families.
#[derive(Clone, Debug)]
pub struct TwinHistogram(Histogram, Histogram);

/// One resolved counter child of both families.
#[derive(Clone, Debug)]
pub struct TwinCounter(GenericCounter<AtomicU64>, GenericCounter<AtomicU64>);

/// One resolved gauge child of both families.
#[derive(Clone, Debug)]
pub struct TwinGauge(Gauge, Gauge);

/// Builds the family under both names and registers both.
fn pair<C: Collector + Clone + 'static>(
    registry: &Registry,
    gie: &str,
    llmd: &str,
    make: impl Fn(&str) -> Result<C, prometheus::Error>,
) -> Result<(C, C), prometheus::Error> {
    let (a, b) = (make(gie)?, make(llmd)?);
    registry.register(Box::new(a.clone()))?;
    registry.register(Box::new(b.clone()))?;
    super::naming::record_twin(gie, llmd);
    Ok((a, b))
}

impl TwinHistogramVec {
    /// Registers `gie` and `llmd` with the same help, buckets and labels.
    pub fn register(
        registry: &Registry,
        gie: &str,
        llmd: &str,
        help: &str,
        buckets: &[f64],
        labels: &[&str],
    ) -> Result<Self, prometheus::Error> {
        let (a, b) = pair(registry, gie, llmd, |name| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
        })?;
        Ok(Self(a, b))
    }

    /// The child for these label values in both families.
    pub fn with(&self, values: &[&str]) -> TwinHistogram {
        TwinHistogram(self.0.with_label_values(values), self.1.with_label_values(values))
    }
}

impl TwinHistogram {
    /// Records one observation in both families.
    pub fn observe(&self, v: f64) {
        self.0.observe(v);
        self.1.observe(v);
    }
}

impl TwinCounterVec {
    /// Registers `gie` and `llmd` with the same help and labels.
    pub fn register(
        registry: &Registry,
        gie: &str,
        llmd: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<Self, prometheus::Error> {
        let (a, b) = pair(registry, gie, llmd, |name| IntCounterVec::new(Opts::new(name, help), labels))?;
        Ok(Self(a, b))
    }

    /// The child for these label values in both families.
    pub fn with(&self, values: &[&str]) -> TwinCounter {
        TwinCounter(self.0.with_label_values(values), self.1.with_label_values(values))
    }
}

impl TwinCounter {
    /// Adds one in both families.
    pub fn inc(&self) {
        self.0.inc();
        self.1.inc();
    }
}

impl TwinGaugeVec {
    /// Registers `gie` and `llmd` with the same help and labels.
    pub fn register(
        registry: &Registry,
        gie: &str,
        llmd: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<Self, prometheus::Error> {
        let (a, b) = pair(registry, gie, llmd, |name| GaugeVec::new(Opts::new(name, help), labels))?;
        Ok(Self(a, b))
    }

    /// The child for these label values in both families.
    pub fn with(&self, values: &[&str]) -> TwinGauge {
        TwinGauge(self.0.with_label_values(values), self.1.with_label_values(values))
    }

    /// Removes a child from both families (e.g. when an endpoint leaves).
    pub fn remove(&self, values: &[&str]) {
        let _ = self.0.remove_label_values(values);
        let _ = self.1.remove_label_values(values);
    }
}

impl TwinGauge {
    /// Sets both.
    pub fn set(&self, v: f64) {
        self.0.set(v);
        self.1.set(v);
    }
    /// Adds to both.
    pub fn add(&self, v: f64) {
        self.0.add(v);
        self.1.add(v);
    }
}

/// Buckets "S" of GIE: scheduler and plugin latencies (seconds).
pub const SCHEDULER_BUCKETS: &[f64] = &[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1];

/// Buckets "G" of GIE: general request latencies (seconds).
pub const GENERAL_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Token-count buckets of GIE (input and cached tokens; 32778 is GIE's own value).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32778.0, 65536.0,
    131072.0, 262144.0, 524288.0, 1048576.0,
];

/// Output-token buckets of GIE.
pub const OUTPUT_TOKEN_BUCKETS: &[f64] =
    &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];

/// Hit-ratio buckets 0.0 ... 1.0 step 0.1.
pub const RATIO_BUCKETS: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Request-size buckets: powers of two from 64 B to 1 GiB.
pub fn size_buckets() -> Vec<f64> {
    (6..=30).map(|p| f64::from(1u32 << p)).collect()
}
