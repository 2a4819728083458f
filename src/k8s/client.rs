//! Building the `kube::Client`: from a kubeconfig file through kube's loader (client
//! certificates, exec credential plugins, auth providers, `proxy-url`,
//! `insecure-skip-tls-verify`, `tls-server-name`) or from the in-cluster service account
//! (`KUBERNETES_SERVICE_HOST`, the mounted token, re-read as it rotates, and CA). TLS is
//! rustls with the `ring` provider, as the rest of epp.

use std::path::{Path, PathBuf};

use super::error::K8sError;

/// Where the API server and credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeSource {
    /// A kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// The in-cluster service account.
    InCluster,
}

impl KubeSource {
    /// `--kubeconfig` / `KUBECONFIG` when given (and not empty), else in-cluster when
    /// `KUBERNETES_SERVICE_HOST` is set, else `None` (no Kubernetes access). As in the Go
    /// EPPs' flag, `~/.kube/config` is not consulted implicitly.
    pub fn detect(kubeconfig: Option<&Path>) -> Option<Self> {
        match kubeconfig {
            Some(path) if !path.as_os_str().is_empty() => Some(Self::Kubeconfig(path.to_path_buf())),
            _ => std::env::var_os("KUBERNETES_SERVICE_HOST").map(|_| Self::InCluster),
        }
    }
}

/// The client for `source`; fails when the configuration cannot be loaded or used.
pub async fn connect(source: &KubeSource) -> Result<kube::Client, K8sError> {
    let config = load_config(source).await?;
    client_from_config(config)
}

/// kube's configuration for `source`.
pub async fn load_config(source: &KubeSource) -> Result<kube::Config, K8sError> {
    match source {
        KubeSource::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|source| K8sError::Kubeconfig { path: path.clone(), source })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| K8sError::Kubeconfig { path: path.clone(), source })
        }
        KubeSource::InCluster => kube::Config::incluster().map_err(K8sError::InCluster),
    }
}

/// A client for `config` (must run inside a Tokio runtime: the client spawns its buffer task).
pub fn client_from_config(config: kube::Config) -> Result<kube::Client, K8sError> {
    install_crypto_provider();
    kube::Client::try_from(config).map_err(K8sError::Client)
}

/// A client for a plain-http API server without authentication (`kubectl proxy`, tests).
pub fn plain_http(url: &str) -> Result<kube::Client, K8sError> {
    let uri =
        url.parse::<http::Uri>().map_err(|e| K8sError::Decode { what: "API server URL", message: e.to_string() })?;
    client_from_config(kube::Config::new(uri))
}

/// rustls needs a process-wide provider when more than one is compiled in; epp uses `ring`.
fn install_crypto_provider() {
    // Err means a provider is installed already (ours or the caller's): nothing to do.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}
