//! Metrics of the Kubernetes watches (`epp_k8s_*`): watch events by resource and type,
//! failures by reason, relists, objects that could not be decoded, pods and endpoints the
//! pool currently yields, notifications delivered by `k8s-notification-source`, and the
//! InferenceObjective / InferenceModelRewrite objects held.
//! The `resource` label is the watched collection (`pods`, `inferencepools`, or the plural of
//! a notification source's kind, bounded by the config).

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Handles of the Kubernetes metric families (cheap to clone).
#[derive(Clone, Debug)]
pub struct K8sMetrics {
    /// `epp_k8s_watch_events_total{resource, type}`; type = added | modified | deleted | bookmark | error.
    pub events: IntCounterVec,
    /// `epp_k8s_watch_failures_total{resource, reason}`; reason = connect | status | timeout | body | gone | decode.
    pub failures: IntCounterVec,
    /// `epp_k8s_relists_total{resource}`: successful LISTs (the first one and every relist).
    pub lists: IntCounterVec,
    /// `epp_k8s_pool_ready_pods`: pods of the pool that are Ready with an IP.
    pub ready_pods: IntGauge,
    /// `epp_k8s_pool_endpoints`: endpoints (pod x active target port) discovered from the pool.
    pub endpoints: IntGauge,
    /// `epp_k8s_leader`: 1 while this replica holds the leader-election Lease.
    pub leader: IntGauge,
    /// `epp_k8s_notifications_total{plugin_name, resource, event}`; event = add_or_update | delete.
    pub notifications: IntCounterVec,
    /// `epp_k8s_objects{resource}`: InferenceObjective / InferenceModelRewrite objects held
    /// for this pool.
    pub objects: IntGaugeVec,
}

impl K8sMetrics {
    /// Registers the families on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        Ok(Self {
            events: counter("epp_k8s_watch_events_total", "Kubernetes watch events received.", &["resource", "type"])?,
            failures: counter(
                "epp_k8s_watch_failures_total",
                "Kubernetes LIST/WATCH failures (each is retried with backoff or a relist).",
                &["resource", "reason"],
            )?,
            lists: counter(
                "epp_k8s_relists_total",
                "Kubernetes LISTs completed (initial list and relists).",
                &["resource"],
            )?,
            ready_pods: gauge("epp_k8s_pool_ready_pods", "Pods of the InferencePool that are Ready with an IP.")?,
            endpoints: gauge(
                "epp_k8s_pool_endpoints",
                "Endpoints (pod x active target port) discovered from the pool.",
            )?,
            leader: gauge("epp_k8s_leader", "1 while this replica holds the leader-election Lease, else 0.")?,
            notifications: counter(
                "epp_k8s_notifications_total",
                "Object notifications delivered by k8s-notification-source plugins.",
                &["plugin_name", "resource", "event"],
            )?,
            objects: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "epp_k8s_objects",
                        "InferenceObjective and InferenceModelRewrite objects held for the pool.",
                    ),
                    &["resource"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
        })
    }

    /// Unregistered handles (tests, components built without a registry).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).expect("fresh registry accepts every family")
    }
}
