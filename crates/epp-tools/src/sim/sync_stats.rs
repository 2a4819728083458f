//! What the replicas' own `epp_replica_sync_*` metrics say about a run, summed over their
//! Prometheus text expositions (an in-process registry encoded, or an epp process' `/metrics`):
//! messages sent, dropped and applied, and the publish-to-apply lag quantiles from the merged
//! `epp_replica_sync_lag_seconds` histograms (linear within a bucket, as Prometheus'
//! `histogram_quantile` does; the buckets are 1, 2, 5, 10, 25, 50, 100 ms, ...).

use epp::endpoints::prom_text::{self, Sample};
use prometheus::Registry;

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

/// The text exposition of an in-process registry.
pub fn registry_text(registry: &Registry) -> String {
    prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap_or_default()
}

/// Sum of every sample named `name` (and carrying `labels`) over the expositions.
pub fn sum(texts: &[String], name: &str, labels: &[(&str, &str)]) -> f64 {
    parsed(texts, name).filter(|s| s.has_labels(labels)).map(|s| s.value).sum()
}

/// The well-formed samples named `name` of every exposition.
fn parsed<'a>(texts: &'a [String], name: &'a str) -> impl Iterator<Item = Sample<'a>> + 'a {
    texts.iter().flat_map(move |t| prom_text::samples_where(t, move |n| n == name).filter_map(Result::ok))
}

/// Sums the sync metrics of every exposition (all zero when sync was off).
pub fn gather(texts: &[String]) -> SyncStats {
    const LAG: &str = "epp_replica_sync_lag_seconds";
    // (upper bound, cumulative count) merged over the replicas; the +Inf bucket is skipped
    // (the `_count` sample is the total).
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for b in parsed(texts, &format!("{LAG}_bucket")) {
        let Some(le) = b.label("le").and_then(|le| le.parse::<f64>().ok()).filter(|le| le.is_finite()) else {
            continue;
        };
        match buckets.iter_mut().find(|(bound, _)| *bound == le) {
            Some(slot) => slot.1 += b.value as u64,
            None => buckets.push((le, b.value as u64)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let samples = sum(texts, &format!("{LAG}_count"), &[]) as u64;
    SyncStats {
        sent: sum(texts, "epp_replica_sync_messages_sent_total", &[]) as u64,
        dropped: sum(texts, "epp_replica_sync_messages_dropped_total", &[]) as u64,
        applied: sum(texts, "epp_replica_sync_messages_received_total", &[("outcome", "applied")]) as u64,
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
        assert_eq!(gather(&[registry_text(&Registry::new())]), SyncStats::default());
    }

    #[test]
    fn expositions_of_two_replicas_are_merged() {
        let replica = |sent: u32, fast: u32, slow: u32| {
            format!(
                "# TYPE epp_replica_sync_messages_sent_total counter\n\
                 epp_replica_sync_messages_sent_total {sent}\n\
                 epp_replica_sync_messages_received_total{{outcome=\"applied\"}} 7\n\
                 epp_replica_sync_messages_received_total{{outcome=\"foreign\"}} 100\n\
                 epp_replica_sync_lag_seconds_bucket{{le=\"0.001\"}} {fast}\n\
                 epp_replica_sync_lag_seconds_bucket{{le=\"0.01\"}} {}\n\
                 epp_replica_sync_lag_seconds_bucket{{le=\"+Inf\"}} {}\n\
                 epp_replica_sync_lag_seconds_count {}\n",
                fast + slow,
                fast + slow,
                fast + slow
            )
        };
        let stats = gather(&[replica(3, 40, 5), replica(4, 50, 5)]);
        assert_eq!((stats.sent, stats.applied, stats.dropped, stats.lag_samples), (7, 14, 0, 100));
        // 90 of 100 under 1 ms, 10 between 1 and 10 ms: p99 is 9.1 ms into that bucket.
        assert!((stats.lag_p99_ms - 9.1).abs() < 1e-6, "{stats:?}");
    }
}
