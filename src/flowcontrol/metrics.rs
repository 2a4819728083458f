//! Flow Control metrics under the GIE names (`inference_extension_flow_control_*`) and
//! their llm-d twins (`llm_d_epp_flow_control_*`), plus llm-d's
//! `llm_d_epp_flow_control_requests_total`. `inference_pool` is the `--pool-name` pool, empty
//! when endpoints come from a file. Fairness ids are client-controlled, so they are capped
//! like model names.

use prometheus::{IntCounterVec, Opts, Registry};

use crate::telemetry::labels::BoundedLabels;
use crate::telemetry::twin::{GENERAL_BUCKETS, SCHEDULER_BUCKETS, TwinGaugeVec, TwinHistogramVec};

/// Distinct fairness ids (and model names) kept as label values.
const LABEL_CAP: usize = 1000;
/// Label values of one queued request.
#[derive(Clone, Debug)]
pub struct FlowLabels {
    /// Fairness id (capped).
    pub fairness_id: String,
    /// Priority.
    pub priority: String,
    /// Incoming model (capped).
    pub model: String,
    /// Target model (capped).
    pub target: String,
}

/// Flow Control metric handles.
#[derive(Debug)]
pub struct FlowControlMetrics {
    queue_duration: TwinHistogramVec,
    enqueue_duration: TwinHistogramVec,
    cycle_duration: TwinHistogramVec,
    queue_size: TwinGaugeVec,
    queue_bytes: TwinGaugeVec,
    saturation: TwinGaugeVec,
    requests: IntCounterVec,
    fairness_ids: BoundedLabels,
    models: BoundedLabels,
    /// The `inference_pool` label value.
    pool: String,
}

impl FlowControlMetrics {
    /// Registers the families; `pool` is the `inference_pool` label value.
    pub fn register(registry: &Registry, pool: &str) -> Result<Self, prometheus::Error> {
        let queue_labels = &["fairness_id", "priority", "inference_pool", "model_name", "target_model_name"];
        let twin =
            |name: &str| (format!("inference_extension_flow_control_{name}"), format!("llm_d_epp_flow_control_{name}"));
        let histogram = |name: &str, help: &str, buckets: &[f64], labels: &[&str]| {
            let (gie, llmd) = twin(name);
            TwinHistogramVec::register(registry, &gie, &llmd, help, buckets, labels)
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let (gie, llmd) = twin(name);
            TwinGaugeVec::register(registry, &gie, &llmd, help, labels)
        };
        let requests = IntCounterVec::new(
            Opts::new("llm_d_epp_flow_control_requests_total", "Flow Control admission outcomes."),
            &["outcome", "priority", "inference_pool"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        Ok(Self {
            queue_duration: histogram(
                "request_queue_duration_seconds",
                "Time requests spent in the Flow Control queue, by final outcome.",
                GENERAL_BUCKETS,
                &["fairness_id", "priority", "outcome", "inference_pool", "model_name", "target_model_name"],
            )?,
            enqueue_duration: histogram(
                "request_enqueue_duration_seconds",
                "Time to admit a request into the Flow Control queue (or reject it).",
                SCHEDULER_BUCKETS,
                &["fairness_id", "priority", "outcome"],
            )?,
            cycle_duration: histogram(
                "dispatch_cycle_duration_seconds",
                "Duration of one Flow Control dispatch cycle.",
                SCHEDULER_BUCKETS,
                &[],
            )?,
            queue_size: gauge("queue_size", "Requests waiting in the Flow Control queue.", queue_labels)?,
            queue_bytes: gauge("queue_bytes", "Bytes of requests waiting in the Flow Control queue.", queue_labels)?,
            saturation: gauge(
                "pool_saturation",
                "Pool saturation seen by the last dispatch cycle.",
                &["inference_pool"],
            )?,
            requests,
            fairness_ids: BoundedLabels::new(LABEL_CAP),
            models: BoundedLabels::new(LABEL_CAP),
            pool: pool.to_string(),
        })
    }

    /// Metrics on a private registry (tests, tools).
    pub fn detached() -> Self {
        Self::register(&Registry::new(), "").expect("a fresh registry has no name clashes")
    }

    /// The label values of a request.
    pub fn labels(&self, fairness_id: &str, priority: i32, model: &str, target: &str) -> FlowLabels {
        FlowLabels {
            fairness_id: self.fairness_ids.get(fairness_id),
            priority: priority.to_string(),
            model: self.models.get(model),
            target: self.models.get(target),
        }
    }

    /// A request entered (`+1`) or left (`-1`) the queue.
    pub fn queued(&self, l: &FlowLabels, sign: f64, bytes: u64) {
        let values = [&*l.fairness_id, &l.priority, &self.pool, &l.model, &l.target];
        self.queue_size.with(&values).add(sign);
        self.queue_bytes.with(&values).add(sign * bytes as f64);
    }

    /// Enqueue step took `seconds` with `outcome` (`Enqueued` or a rejection).
    pub fn enqueued(&self, l: &FlowLabels, outcome: &str, seconds: f64) {
        self.enqueue_duration.with(&[&l.fairness_id, &l.priority, outcome]).observe(seconds);
    }

    /// A request's admission finished with `outcome` after `seconds` in the queue.
    pub fn finished(&self, l: &FlowLabels, outcome: &str, seconds: f64) {
        let values = [&*l.fairness_id, &l.priority, outcome, &self.pool, &l.model, &l.target];
        self.queue_duration.with(&values).observe(seconds);
        self.requests.with_label_values(&[outcome, &l.priority, &self.pool]).inc();
    }

    /// One dispatch cycle ran.
    pub fn cycle(&self, seconds: f64, saturation: f64) {
        self.cycle_duration.with(&[]).observe(seconds);
        self.saturation.with(&[&self.pool]).set(saturation);
    }
}
