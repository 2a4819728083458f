//! Static discovery: the `--endpoints-file` YAML, parsed into endpoints and reloaded when the
//! file changes. The file format is a contract other tools rely on:
//!
//! ```yaml
//! endpoints:
//!   - name: pod-a                      # unique id
//!     address: 10.0.0.5                # IPv4 or IPv6
//!     port: 8000                       # serving port; destination = address:port
//!     metricsPort: 8000                # optional, default = port
//!     labels: {llm-d.ai/role: decode}  # optional
//!     kvEventsEndpoint: tcp://10.0.0.5:5557   # optional
//! ```
//!
//! llm-d's `file-discovery` format is accepted too: `port` may be a string (`"8000"`),
//! `namespace` is accepted (and ignored: endpoint names must be unique in the file), and
//! `metricsHost: "ip:port"` sets the metrics port (its host must be the endpoint's address,
//! since metrics are scraped from the serving address).
//!
//! A reload that fails to parse keeps the previous list (and logs why); in-flight requests
//! keep the candidates they already hold, so a reload never disturbs a stream.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::file_watch::{Change, ContentWatch};

use super::model::Endpoint;
use super::store::EndpointStore;

/// Why an endpoints file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The file could not be read.
    #[error("cannot read endpoints file {path}: {source}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not match the format.
    #[error("endpoints file {path} is not valid: {source}")]
    Parse {
        /// File path.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: serde_yaml::Error,
    },
    /// A semantic problem (duplicate name, bad address, port 0).
    #[error("endpoints file {path}: {message}")]
    Invalid {
        /// File path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    endpoints: Vec<RawEndpoint>,
}

/// A port written as a number (`8000`) or, as llm-d's format has it, a string (`"8000"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawPort {
    Number(u64),
    Text(String),
}

impl RawPort {
    fn value(&self) -> Option<u16> {
        match self {
            RawPort::Number(n) => u16::try_from(*n).ok(),
            RawPort::Text(t) => t.trim().parse().ok(),
        }
        .filter(|p| *p != 0)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEndpoint {
    name: String,
    #[serde(default)]
    #[allow(dead_code)] // accepted for llm-d file-discovery compatibility
    namespace: Option<String>,
    address: String,
    port: RawPort,
    metrics_port: Option<u16>,
    metrics_host: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    kv_events_endpoint: Option<String>,
    rank: Option<u16>,
}

/// Parses endpoints-file text. `origin` names the file in errors.
pub fn parse_endpoints(text: &str, origin: &Path) -> Result<Vec<Endpoint>, DiscoveryError> {
    let invalid = |message: String| DiscoveryError::Invalid { path: origin.to_path_buf(), message };
    // A zero-byte file is what a non-atomic rewrite leaves for a moment: never "no endpoints"
    // (write `endpoints: []` to empty the list on purpose).
    if text.trim().is_empty() {
        return Err(invalid("file is empty; write `endpoints: []` to remove every endpoint".into()));
    }
    crate::yaml_limits::check(text, crate::yaml_limits::ENDPOINTS)
        .map_err(|e| invalid(format!("refused before parsing: {e}")))?;
    let raw: RawFile =
        serde_yaml::from_str(text).map_err(|source| DiscoveryError::Parse { path: origin.to_path_buf(), source })?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(raw.endpoints.len());
    for (i, e) in raw.endpoints.into_iter().enumerate() {
        if e.name.is_empty() {
            return Err(invalid(format!("endpoints[{i}].name is empty")));
        }
        if !seen.insert(e.name.clone()) {
            return Err(invalid(format!("endpoints[{i}].name {:?} is not unique", e.name)));
        }
        let trimmed = e.address.trim_start_matches('[').trim_end_matches(']');
        let address: IpAddr = trimmed
            .parse()
            .map_err(|_| invalid(format!("endpoints[{i}].address {:?} is not an IPv4 or IPv6 address", e.address)))?;
        let Some(port) = e.port.value() else {
            return Err(invalid(format!("endpoints[{i}].port must be 1-65535")));
        };
        let mut metrics_port = e.metrics_port.filter(|p| *p != 0).unwrap_or(port);
        if let Some(host) = &e.metrics_host {
            metrics_port =
                metrics_host_port(host, address).map_err(|m| invalid(format!("endpoints[{i}].metricsHost {m}")))?;
        }
        let mut endpoint = Endpoint::new(e.name, address, port);
        endpoint.metrics_port = metrics_port;
        endpoint.labels = e.labels;
        endpoint.kv_events_endpoint = e.kv_events_endpoint;
        endpoint.rank = e.rank.unwrap_or(0);
        out.push(endpoint);
    }
    Ok(out)
}

/// The port of an llm-d `metricsHost` (`ip:port`), whose host must be `address`.
fn metrics_host_port(host: &str, address: IpAddr) -> Result<u16, String> {
    let parsed: std::net::SocketAddr =
        host.parse().map_err(|_| format!("{host:?} is not ip:port (IPv6 as [ip]:port)"))?;
    if parsed.ip() != address {
        return Err(format!("{host:?} must use the endpoint's address {address}"));
    }
    if parsed.port() == 0 {
        return Err(format!("{host:?} has port 0"));
    }
    Ok(parsed.port())
}

/// Reads and parses an endpoints file.
pub fn load_endpoints_file(path: &Path) -> Result<Vec<Endpoint>, DiscoveryError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| DiscoveryError::Read { path: path.to_path_buf(), source })?;
    parse_endpoints(&text, path)
}

/// Reads and parses an endpoints file, returning the bytes too (the watcher compares later
/// contents with them, so a change made right after startup is never missed).
pub fn load_endpoints_file_bytes(path: &Path) -> Result<(Vec<Endpoint>, Vec<u8>), DiscoveryError> {
    let bytes = std::fs::read(path).map_err(|source| DiscoveryError::Read { path: path.to_path_buf(), source })?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| DiscoveryError::Invalid { path: path.to_path_buf(), message: e.to_string() })?;
    Ok((parse_endpoints(text, path)?, bytes))
}

/// Watches an endpoints file by polling its contents every `interval`, publishing each
/// valid change to the store. `loaded` is the content already published. Runs until
/// `cancel` fires.
pub async fn watch_endpoints_file(
    path: PathBuf,
    loaded: Vec<u8>,
    store: EndpointStore,
    interval: Duration,
    cancel: CancellationToken,
) {
    let source = path.clone();
    let mut watch = ContentWatch::new(interval, Some(&loaded), move || std::fs::read(&source));
    while let Some(change) = watch.next(&cancel).await {
        let bytes = match change {
            Change::Changed(bytes) => bytes,
            Change::Unreadable(error) => {
                warn!(path = %path.display(), %error, "Endpoints file unreadable; keeping the previous list");
                continue;
            }
        };
        let parsed = String::from_utf8(bytes)
            .map_err(|e| DiscoveryError::Invalid { path: path.clone(), message: e.to_string() })
            .and_then(|text| parse_endpoints(&text, &path));
        match parsed {
            Ok(endpoints) => {
                let diff = store.replace(endpoints);
                diff.log();
                info!(path = %path.display(), added = diff.added.len(), updated = diff.updated.len(),
                    removed = diff.removed.len(), "Endpoints file reloaded");
            }
            Err(error) => warn!(%error, "Endpoints file change rejected; keeping the previous list"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_format() {
        let text = r#"
endpoints:
  - name: pod-a
    address: 10.0.0.5
    port: 8000
    metricsPort: 9000
    labels: {llm-d.ai/role: decode}
    kvEventsEndpoint: tcp://10.0.0.5:5557
  - name: pod-b
    address: "fd00::2"
    port: 8001
"#;
        let eps = parse_endpoints(text, Path::new("t.yaml")).unwrap();
        assert_eq!(eps[0].metrics_port, 9000);
        assert_eq!(eps[0].label("llm-d.ai/role"), Some("decode"));
        assert_eq!(&*eps[0].host_port, "10.0.0.5:8000");
        assert_eq!(eps[1].metrics_port, 8001);
        assert_eq!(&*eps[1].host_port, "[fd00::2]:8001");
    }

    #[test]
    fn accepts_the_llm_d_file_discovery_format() {
        let text = r#"
endpoints:
  - name: vllm-0
    namespace: inference
    address: 10.0.0.5
    port: "8000"
    metricsHost: "10.0.0.5:9090"
    labels: {llm-d.ai/role: decode}
  - name: vllm-1
    address: "fd00::3"
    port: "8001"
"#;
        let eps = parse_endpoints(text, Path::new("t.yaml")).unwrap();
        assert_eq!((&*eps[0].host_port, eps[0].metrics_port), ("10.0.0.5:8000", 9090));
        assert_eq!((&*eps[1].host_port, eps[1].metrics_port), ("[fd00::3]:8001", 8001));
        for bad in [
            "endpoints: [{name: a, address: 10.0.0.1, port: \"x\"}]",
            "endpoints: [{name: a, address: 10.0.0.1, port: 70000}]",
            "endpoints: [{name: a, address: 10.0.0.1, port: \"0\"}]",
            "endpoints: [{name: a, address: 10.0.0.1, port: 1, metricsHost: \"10.0.0.2:9\"}]",
            "endpoints: [{name: a, address: 10.0.0.1, port: 1, metricsHost: \"pod-a:9\"}]",
        ] {
            assert!(matches!(parse_endpoints(bad, Path::new("f")), Err(DiscoveryError::Invalid { .. })), "{bad}");
        }
    }

    #[test]
    fn empty_and_deep_files_are_refused_but_an_empty_list_is_not() {
        for text in ["", "\n  \n"] {
            let err = parse_endpoints(text, Path::new("f")).unwrap_err().to_string();
            assert!(err.contains("file is empty"), "{err}");
        }
        let deep = "endpoints: ".to_string() + &"[".repeat(40_000);
        let err = parse_endpoints(&deep, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("nesting deeper than"), "{err}");
        assert_eq!(parse_endpoints("endpoints: []", Path::new("f")).unwrap().len(), 0);
    }

    #[test]
    fn rejects_duplicates_unknown_fields_and_bad_addresses() {
        let dup = "endpoints: [{name: a, address: 10.0.0.1, port: 1}, {name: a, address: 10.0.0.2, port: 1}]";
        assert!(matches!(parse_endpoints(dup, Path::new("f")), Err(DiscoveryError::Invalid { .. })));
        let unknown = "endpoints: [{name: a, address: 10.0.0.1, port: 1, weight: 3}]";
        assert!(matches!(parse_endpoints(unknown, Path::new("f")), Err(DiscoveryError::Parse { .. })));
        let bad = "endpoints: [{name: a, address: pod-a.local, port: 1}]";
        assert!(matches!(parse_endpoints(bad, Path::new("f")), Err(DiscoveryError::Invalid { .. })));
    }
}
