//! Kubernetes: endpoint discovery from an InferencePool and object notifications for
//! `k8s-notification-source`, on a small hyper client (no kube-rs).
//!
//! ```text
//! config (in-cluster / kubeconfig) -> client (HTTP/1.1, rustls) -> watch (LIST + WATCH, relist on 410)
//!   -> discovery (pool + pods -> Endpoint list) -> endpoints::store (same path as --endpoints-file)
//!   -> notify (any GVK -> typed Notification broadcast to subscribers)
//! ```
//!
//! `pool` and `pod` are pure parsers of the two object kinds; only they know their JSON shape.

pub mod client;
pub mod config;
pub mod discovery;
pub mod metrics;
pub mod notify;
pub mod pod;
pub mod pool;
pub mod watch;

/// What background services get to reach the cluster (see `ServiceContext::kube`).
#[derive(Clone, Debug)]
pub struct KubeHandle {
    /// API client.
    pub client: client::ApiClient,
    /// Namespace watched objects live in (the pool namespace).
    pub namespace: String,
    /// Metric handles.
    pub metrics: metrics::K8sMetrics,
    /// Retry settings.
    pub options: watch::WatchOptions,
}
