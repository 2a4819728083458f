//! What the replicas' own `epp_replica_sync_*` metrics say about a run, summed over their
//! registries: messages sent, dropped and applied, and the publish-to-apply lag quantiles
//! from the merged `epp_replica_sync_lag_seconds` histograms (linear within a bucket, as
//! Prometheus' `histogram_quantile` does; the buckets are 1, 2, 5, 10, 25, 50, 100 ms, ...).

use prometheus::Registry;
use prometheus::proto::MetricFamily;

/// Sync counters and lag of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SyncStats {
    /// Messages written to Redis (`epp_replica_sync_messages_sent_total`).
    pub sent: u64,
    /// Messages not sent (`epp_replica_sync_messages_dropped_total`, every reason).
    pub dropped: u64,
    /// Other replicas' messages applied (`..._received_total{outcome="applied"}`).
    pub applied: u64,
    /// Lag observations (live reads of other replicas' updates).
    pub lag_samples: u64,
    /// Median publish-to-apply lag, milliseconds.
    pub lag_p50_ms: f64,
    /// 99th percentile publish-to-apply lag, milliseconds.
    pub lag_p99_ms: f64,
}

/// Sums the sync metrics of every registry (all zero when sync was off).
pub fn gather(registries: &[&Registry]) -> SyncStats {
    let families: Vec<MetricFamily> = registries.iter().flat_map(|r| r.gather()).collect();
    let counter = |name: &str, label: Option<(&str, &str)>| -> u64 {
        families
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric())
            .filter(|m| label.is_none_or(|(k, v)| m.get_label().iter().any(|l| l.name() == k && l.value() == v)))
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    };
    // (upper bound, cumulative count) merged over the replicas.
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut samples = 0;
    for h in families
        .iter()
        .filter(|f| f.name() == "epp_replica_sync_lag_seconds")
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_histogram())
    {
        samples += h.get_sample_count();
        for b in h.get_bucket() {
            match buckets.iter_mut().find(|(le, _)| *le == b.upper_bound()) {
                Some(slot) => slot.1 += b.cumulative_count(),
                None => buckets.push((b.upper_bound(), b.cumulative_count())),
            }
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    SyncStats {
        sent: counter("epp_replica_sync_messages_sent_total", None),
        dropped: counter("epp_replica_sync_messages_dropped_total", None),
        applied: counter("epp_replica_sync_messages_received_total", Some(("outcome", "applied"))),
        lag_samples: samples,
        lag_p50_ms: quantile(&buckets, samples, 0.50) * 1e3,
        lag_p99_ms: quantile(&buckets, samples, 0.99) * 1e3,
    }
}

/// The `q` quantile of a cumulative histogram of `total` observations; above the last
/// finite bucket, that bucket's bound.
fn quantile(buckets: &[(f64, u64)], total: u64, q: f64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(le, cumulative) in buckets {
        if cumulative as f64 >= rank {
            let in_bucket = (cumulative - below).max(1) as f64;
            return lower + (le - lower) * ((rank - below as f64) / in_bucket);
        }
        (lower, below) = (le, cumulative);
    }
    lower
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        // 100 observations: 90 under 1 ms, 10 between 5 and 10 ms.
        let buckets = [(0.001, 90), (0.002, 90), (0.005, 90), (0.01, 100)];
        assert!((quantile(&buckets, 100, 0.5) - 0.5e-3 * 100.0 / 90.0).abs() < 1e-9);
        assert!((quantile(&buckets, 100, 0.99) - 0.0095).abs() < 1e-9);
        assert_eq!(quantile(&buckets, 0, 0.99), 0.0);
    }

    #[test]
    fn registries_without_sync_read_zero() {
        assert_eq!(gather(&[&Registry::new()]), SyncStats::default());
    }
}
