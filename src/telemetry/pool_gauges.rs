//! GIE's `inference_pool_*` gauges and their llm-d twins, recomputed from the endpoint store
//! every `--refresh-prometheus-metrics-interval` (GIE's `inference_pool` collector).
//!
//! As in GIE, only endpoints whose metrics are known (scraped within
//! `--metrics-staleness-threshold`, not invalid) count: `inference_pool_ready_pods` is that
//! count, not Kubernetes' ready count. Averages over no endpoints are 0. Per-endpoint series
//! are removed when an endpoint leaves or its metrics go stale, so the series count follows
//! the fleet.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{Gauge, GaugeVec, Opts, Registry};
use tokio_util::sync::CancellationToken;

use super::twin::{TwinGauge, TwinGaugeVec};
use crate::endpoints::model::Candidate;
use crate::endpoints::store::EndpointStore;

/// The pool-level gauge families.
#[derive(Debug)]
pub struct PoolGauges {
    average_kv: TwinGauge,
    average_queue: TwinGauge,
    average_running: TwinGauge,
    ready: TwinGauge,
    std_dev_kv: Gauge,
    std_dev_queue: Gauge,
    std_dev_running: Gauge,
    per_pod_queue: GaugeVec,
    per_endpoint_queue: GaugeVec,
    per_endpoint_running: GaugeVec,
    pool: String,
    exported: Mutex<BTreeSet<String>>,
}

/// Mean and population standard deviation of `values` (0, 0 when empty).
fn mean_and_std_dev(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = values.clone().count();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = values.clone().sum::<f64>() / n as f64;
    let variance = values.map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
    (mean, variance.sqrt())
}

impl PoolGauges {
    /// Registers the families; `pool` is the `name` label value (`--pool-name`, empty when
    /// endpoints come from a file).
    pub fn register(registry: &Registry, pool: &str) -> Result<Self, prometheus::Error> {
        let name = &["name"];
        let twin = |gie: &str, llmd: &str, help: &str| {
            TwinGaugeVec::register(registry, gie, llmd, help, name).map(|v| v.with(&[pool]))
        };
        let single = |metric: &str, help: &str| -> Result<Gauge, prometheus::Error> {
            let vec = GaugeVec::new(Opts::new(metric, help), name)?;
            registry.register(Box::new(vec.clone()))?;
            Ok(vec.with_label_values(&[pool]))
        };
        let per_endpoint = |metric: &str, help: &str, label: &str| -> Result<GaugeVec, prometheus::Error> {
            let vec = GaugeVec::new(Opts::new(metric, help), &["name", label])?;
            registry.register(Box::new(vec.clone()))?;
            Ok(vec)
        };
        Ok(Self {
            average_kv: twin(
                "inference_pool_average_kv_cache_utilization",
                "llm_d_epp_average_kv_cache_utilization",
                "The average kv cache utilization for an inference server pool.",
            )?,
            average_queue: twin(
                "inference_pool_average_queue_size",
                "llm_d_epp_average_queue_size",
                "The average number of requests pending in the model server queue.",
            )?,
            average_running: twin(
                "inference_pool_average_running_requests",
                "llm_d_epp_average_running_requests",
                "The average number of requests running on the model servers of the pool.",
            )?,
            ready: twin(
                "inference_pool_ready_pods",
                "llm_d_epp_ready_endpoints",
                "The number of endpoints of the pool with fresh metrics.",
            )?,
            std_dev_kv: single(
                "llm_d_epp_std_dev_kv_cache_utilization",
                "Standard deviation of the kv cache utilization across the pool's endpoints.",
            )?,
            std_dev_queue: single(
                "llm_d_epp_std_dev_queue_size",
                "Standard deviation of the queue size across the pool's endpoints.",
            )?,
            std_dev_running: single(
                "llm_d_epp_std_dev_running_requests",
                "Standard deviation of the running requests across the pool's endpoints.",
            )?,
            per_pod_queue: per_endpoint(
                "inference_pool_per_pod_queue_size",
                "The total number of queue for each model server pod under the inference pool.",
                "model_server_pod",
            )?,
            per_endpoint_queue: per_endpoint(
                "llm_d_epp_per_endpoint_queue_size",
                "Requests waiting in each model server endpoint's queue.",
                "model_server_endpoint",
            )?,
            per_endpoint_running: per_endpoint(
                "epp_pool_per_endpoint_running_requests",
                "Requests in each model server endpoint's running batch.",
                "model_server_endpoint",
            )?,
            pool: pool.to_string(),
            exported: Mutex::new(BTreeSet::new()),
        })
    }

    /// Recomputes every gauge from `candidates` (the store's view at one instant).
    pub fn refresh(&self, candidates: &[Candidate]) {
        let fresh: Vec<&Candidate> = candidates.iter().filter(|c| c.metrics_known).collect();
        let kv = fresh.iter().map(|c| c.metrics.metrics.kv_cache_usage);
        let queue = fresh.iter().map(|c| c.metrics.metrics.waiting_queue_size as f64);
        let running = fresh.iter().map(|c| c.metrics.metrics.running_requests as f64);
        let ((kv_mean, kv_sd), (queue_mean, queue_sd), (running_mean, running_sd)) =
            (mean_and_std_dev(kv), mean_and_std_dev(queue), mean_and_std_dev(running));
        self.average_kv.set(kv_mean);
        self.average_queue.set(queue_mean);
        self.average_running.set(running_mean);
        self.ready.set(fresh.len() as f64);
        self.std_dev_kv.set(kv_sd);
        self.std_dev_queue.set(queue_sd);
        self.std_dev_running.set(running_sd);

        let mut now_exported = BTreeSet::new();
        for c in &fresh {
            let id: &str = c.id();
            let labels = [self.pool.as_str(), id];
            let m = &c.metrics.metrics;
            self.per_pod_queue.with_label_values(&labels).set(m.waiting_queue_size as f64);
            self.per_endpoint_queue.with_label_values(&labels).set(m.waiting_queue_size as f64);
            self.per_endpoint_running.with_label_values(&labels).set(m.running_requests as f64);
            now_exported.insert(id.to_string());
        }
        let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
        for gone in exported.difference(&now_exported) {
            let labels = [self.pool.as_str(), gone.as_str()];
            let _ = self.per_pod_queue.remove_label_values(&labels);
            let _ = self.per_endpoint_queue.remove_label_values(&labels);
            let _ = self.per_endpoint_running.remove_label_values(&labels);
        }
        *exported = now_exported;
    }

    /// Refreshes from `store` now and then every `interval` until `cancel`.
    pub async fn run(self, store: EndpointStore, interval: Duration, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticks.tick() => self.refresh(&store.candidates()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    use prometheus::Encoder;
    use tokio::time::Instant;

    use super::*;
    use crate::endpoints::model::{Endpoint, MetricsState};
    use crate::endpoints::vllm_metrics::PodMetrics;

    fn candidate(id: &str, queue: u64, running: u64, kv: f64, known: bool) -> Candidate {
        let metrics = MetricsState {
            metrics: PodMetrics {
                waiting_queue_size: queue,
                running_requests: running,
                kv_cache_usage: kv,
                ..Default::default()
            },
            updated_at: Some(Instant::now()),
            ..Default::default()
        };
        Candidate {
            endpoint: Arc::new(Endpoint::new(id, IpAddr::V4(Ipv4Addr::LOCALHOST), 8000)),
            metrics: Arc::new(metrics),
            models: None,
            metrics_known: known,
        }
    }

    fn exposition(registry: &Registry) -> String {
        let mut buf = Vec::new();
        prometheus::TextEncoder::new().encode(&registry.gather(), &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn averages_count_only_fresh_endpoints_and_stale_series_leave() {
        let registry = Registry::new();
        let gauges = PoolGauges::register(&registry, "pool-a").unwrap();
        gauges.refresh(&[
            candidate("a-rank-0", 2, 4, 0.2, true),
            candidate("b-rank-0", 6, 8, 0.6, true),
            candidate("c-rank-0", 100, 100, 1.0, false),
        ]);
        let text = exposition(&registry);
        for line in [
            "inference_pool_ready_pods{name=\"pool-a\"} 2",
            "llm_d_epp_ready_endpoints{name=\"pool-a\"} 2",
            "inference_pool_average_queue_size{name=\"pool-a\"} 4",
            "inference_pool_average_running_requests{name=\"pool-a\"} 6",
            "inference_pool_average_kv_cache_utilization{name=\"pool-a\"} 0.4",
            "llm_d_epp_std_dev_queue_size{name=\"pool-a\"} 2",
            "inference_pool_per_pod_queue_size{model_server_pod=\"a-rank-0\",name=\"pool-a\"} 2",
            "llm_d_epp_per_endpoint_queue_size{model_server_endpoint=\"b-rank-0\",name=\"pool-a\"} 6",
            "epp_pool_per_endpoint_running_requests{model_server_endpoint=\"b-rank-0\",name=\"pool-a\"} 8",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("c-rank-0"), "stale endpoint exported:\n{text}");

        gauges.refresh(&[candidate("b-rank-0", 1, 1, 0.1, true)]);
        let text = exposition(&registry);
        assert!(!text.contains("a-rank-0"), "departed endpoint still exported:\n{text}");
        assert!(text.contains("inference_pool_ready_pods{name=\"pool-a\"} 1"), "{text}");

        gauges.refresh(&[]);
        let text = exposition(&registry);
        assert!(text.contains("inference_pool_ready_pods{name=\"pool-a\"} 0"), "{text}");
        assert!(text.contains("inference_pool_average_kv_cache_utilization{name=\"pool-a\"} 0"), "{text}");
        assert!(!text.contains("b-rank-0"), "{text}");
    }
}
