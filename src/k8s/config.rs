//! Where the Kubernetes API server is and how to authenticate to it: in-cluster settings
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, the service-account token and CA under
//! `/var/run/secrets/kubernetes.io/serviceaccount/`) or a kubeconfig file (current context:
//! server URL, CA, bearer token or token file). Client certificates and exec/auth-provider
//! plugins are not supported; the error says so. No I/O besides reading the named files.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Directory of the mounted service-account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why the cluster settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig is not valid YAML of the expected shape.
    #[error("kubeconfig {path} is not valid: {source}")]
    Parse {
        /// File path.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: serde_yaml::Error,
    },
    /// A semantic problem (missing context, unsupported auth, bad URL).
    #[error("{0}")]
    Invalid(String),
}

/// Address of the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    /// `https` (true) or `http` (false; tests and `kubectl proxy`).
    pub https: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl ServerUrl {
    /// Parses `https://host[:port]` or `http://host[:port]` (a path prefix is rejected).
    pub fn parse(url: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::Invalid(format!("server URL {url:?} must be http(s)://host[:port]"));
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(invalid());
        };
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() || rest.contains('/') {
            return Err(invalid());
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(invalid)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| invalid())?,
                None if after.is_empty() => default_port,
                None => return Err(invalid()),
            };
            (host.to_string(), port)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| invalid())?),
                None => (rest.to_string(), default_port),
            }
        };
        Ok(Self { https, host, port })
    }

    /// `host:port` for the TCP connection (IPv6 bracketed).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Bearer token source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// No authentication (plain-http test servers, `kubectl proxy`).
    None,
    /// A fixed token.
    Static(String),
    /// A token file, re-read for every connection (projected service-account tokens rotate).
    File(PathBuf),
}

/// Everything needed to talk to one API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Server address.
    pub server: ServerUrl,
    /// Bearer token.
    pub token: Token,
    /// PEM bundle of trusted CAs for https (`None`: the server must be http).
    pub ca_pem: Option<Vec<u8>>,
    /// Namespace of the kubeconfig context or of the service account, when known
    /// (informational: as in GIE, the pool namespace comes from `--pool-namespace` or env
    /// `NAMESPACE`).
    pub namespace: Option<String>,
}

impl ClusterConfig {
    /// A plain-http server without authentication (tests).
    pub fn plain(host: &str, port: u16) -> Self {
        Self {
            server: ServerUrl { https: false, host: host.into(), port },
            token: Token::None,
            ca_pem: None,
            namespace: None,
        }
    }

    /// In-cluster settings, when `KUBERNETES_SERVICE_HOST` is set.
    pub fn in_cluster() -> Result<Option<Self>, ConfigError> {
        let Ok(host) = std::env::var("KUBERNETES_SERVICE_HOST") else { return Ok(None) };
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let port = port
            .parse()
            .map_err(|_| ConfigError::Invalid(format!("KUBERNETES_SERVICE_PORT {port:?} is not a port")))?;
        let dir = Path::new(SERVICE_ACCOUNT_DIR);
        let ca_path = dir.join("ca.crt");
        let ca = std::fs::read(&ca_path).map_err(|source| ConfigError::Read { path: ca_path, source })?;
        let namespace = std::fs::read_to_string(dir.join("namespace")).ok().map(|s| s.trim().to_string());
        Ok(Some(Self {
            server: ServerUrl { https: true, host: host.trim_matches(['[', ']']).to_string(), port },
            token: Token::File(dir.join("token")),
            ca_pem: Some(ca),
            namespace,
        }))
    }

    /// Settings of the current context of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let file: KubeConfig =
            serde_yaml::from_str(&text).map_err(|source| ConfigError::Parse { path: path.into(), source })?;
        let base = path.parent().unwrap_or(Path::new("."));
        file.resolve(base)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct KubeConfig {
    #[serde(default)]
    current_context: String,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Debug, Default, Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
    namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(alias = "tokenFile")]
    token_file: Option<PathBuf>,
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    exec: Option<serde_yaml::Value>,
    auth_provider: Option<serde_yaml::Value>,
}

impl KubeConfig {
    fn resolve(self, base: &Path) -> Result<ClusterConfig, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        let context = match self.contexts.iter().find(|c| c.name == self.current_context) {
            Some(c) => &c.value,
            None if self.contexts.len() == 1 => &self.contexts[0].value,
            None => return Err(invalid(format!("kubeconfig: current-context {:?} not found", self.current_context))),
        };
        let cluster = self
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .map(|c| &c.value)
            .ok_or_else(|| invalid(format!("kubeconfig: cluster {:?} not found", context.cluster)))?;
        if cluster.insecure_skip_tls_verify {
            return Err(invalid("kubeconfig: insecure-skip-tls-verify is not supported; give the cluster CA".into()));
        }
        let server = ServerUrl::parse(&cluster.server)?;
        let ca_pem = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
            (Some(data), _) => Some(
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data.trim())
                    .map_err(|e| invalid(format!("kubeconfig: certificate-authority-data: {e}")))?,
            ),
            (None, Some(p)) => {
                let p = base.join(p);
                Some(std::fs::read(&p).map_err(|source| ConfigError::Read { path: p, source })?)
            }
            (None, None) => None,
        };
        let user = self.users.iter().find(|u| u.name == context.user).map(|u| &u.value);
        let token = match user {
            Some(u) if u.client_certificate.is_some() || u.client_certificate_data.is_some() => {
                return Err(invalid(
                    "kubeconfig: client-certificate authentication is not supported; use a token".into(),
                ));
            }
            Some(u) if u.exec.is_some() || u.auth_provider.is_some() => {
                return Err(invalid(
                    "kubeconfig: exec and auth-provider credentials are not supported; use a token".into(),
                ));
            }
            Some(User { token: Some(t), .. }) => Token::Static(t.clone()),
            Some(User { token_file: Some(p), .. }) => Token::File(base.join(p)),
            _ => Token::None,
        };
        Ok(ClusterConfig { server, token, ca_pem, namespace: context.namespace.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_urls() {
        let u = ServerUrl::parse("https://10.0.0.1:6443").unwrap();
        assert_eq!((u.https, u.host.as_str(), u.port), (true, "10.0.0.1", 6443));
        let u = ServerUrl::parse("http://127.0.0.1:8001/").unwrap();
        assert_eq!((u.https, u.port), (false, 8001));
        let u = ServerUrl::parse("https://[fd00::1]").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.authority().as_str()), ("fd00::1", 443, "[fd00::1]:443"));
        assert!(ServerUrl::parse("ftp://x").is_err());
        assert!(ServerUrl::parse("https://x/prefix").is_err());
    }

    #[test]
    fn resolves_the_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\ncurrent-context: b\ncontexts:\n- name: a\n  context: {cluster: one, user: u}\n- name: b\n  context: {cluster: two, user: u, namespace: ns}\nclusters:\n- name: one\n  cluster: {server: 'https://one:443'}\n- name: two\n  cluster: {server: 'http://127.0.0.1:9999'}\nusers:\n- name: u\n  user: {token: abc}\n").unwrap();
        let c = ClusterConfig::from_kubeconfig(&path).unwrap();
        assert_eq!(c.server, ServerUrl { https: false, host: "127.0.0.1".into(), port: 9999 });
        assert_eq!(c.token, Token::Static("abc".into()));
        assert_eq!(c.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn rejects_unsupported_auth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://h'}}]\nusers: [{name: u, user: {client-certificate-data: eA==}}]\n").unwrap();
        assert!(matches!(ClusterConfig::from_kubeconfig(&path), Err(ConfigError::Invalid(_))));
    }
}
