//! The typed error of everything under `src/k8s`: configuration loading, API calls, watches,
//! discovery of kinds and the leader-election Lease. Sources are kept (`#[source]`) so a log
//! line shows the whole chain.

use std::path::PathBuf;

/// Why a Kubernetes operation failed.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// The kubeconfig file could not be read, parsed or resolved (context, cluster, user,
    /// certificates, exec plugin settings).
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file given with `--kubeconfig` / `KUBECONFIG`.
        path: PathBuf,
        /// kube's loader error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The in-cluster service-account settings are unusable.
    #[error("in-cluster configuration: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    /// Building the HTTP client from a valid configuration failed (TLS material, proxy).
    #[error("Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// An API call failed (connection, authentication, an error status).
    #[error("Kubernetes API call failed: {0}")]
    Api(#[source] kube::Error),
    /// A watch failed; the watcher retries with backoff.
    #[error("Kubernetes watch failed: {0}")]
    Watch(#[source] kube::runtime::watcher::Error),
    /// `--pool-group` names a group epp does not know.
    #[error("unsupported --pool-group {0:?}: use {g1} or {g2}", g1 = super::pool::GROUP_V1, g2 = super::pool::GROUP_V1ALPHA2)]
    UnsupportedPoolGroup(String),
    /// An object the API server sent does not have the expected shape.
    #[error("{what}: {message}")]
    Decode {
        /// Which object or field.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl K8sError {
    /// The HTTP status of an API error answer, if this is one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Api(kube::Error::Api(status)) | Self::Client(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }
}
