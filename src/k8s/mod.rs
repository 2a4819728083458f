//! Kubernetes: endpoint discovery from an InferencePool and object notifications for
//! `k8s-notification-source`, on kube-rs (`kube::Client`, kube-runtime's watcher).
//!
//! ```text
//! client (kubeconfig / in-cluster -> kube::Client) -> watch (kube watcher: LIST + WATCH, relist on 410)
//!   -> discovery (pool + pods -> Endpoint list) -> endpoints::store (same path as --endpoints-file)
//!   -> notify (any GVK -> typed Notification broadcast to subscribers)
//!   -> objectives (InferenceObjective / InferenceModelRewrite of the pool -> objectives::ObjectiveStore)
//! ```
//!
//! `pool` and `pod` are pure parsers of the two object kinds; only they know their JSON shape.

pub mod client;
pub mod discovery;
pub mod error;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod objectives;
pub mod pod;
pub mod pool;
pub mod review;
pub mod watch;

/// What background services get to reach the cluster (see `ServiceContext::kube`).
#[derive(Clone)]
pub struct KubeHandle {
    /// API client.
    pub client: kube::Client,
    /// Namespace watched objects live in (the pool namespace).
    pub namespace: String,
    /// Metric handles.
    pub metrics: metrics::K8sMetrics,
    /// Retry settings.
    pub options: watch::WatchOptions,
}

impl std::fmt::Debug for KubeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeHandle").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}
