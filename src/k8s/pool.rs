//! The InferencePool object: which pods (label selector) and which ports (one endpoint per
//! target port = per data-parallel rank) make up the pool. Parses both API versions GIE
//! serves: `inference.networking.k8s.io/v1` (`spec.selector.matchLabels`,
//! `spec.targetPorts[].number`) and `inference.networking.x-k8s.io/v1alpha2`
//! (`spec.selector` as a plain map, `spec.targetPortNumber`). Pure; no I/O.

use std::collections::BTreeMap;

use kube::core::ApiResource;
use serde::Deserialize;

use super::error::K8sError;

/// The stable API group (GIE's `--pool-group` default).
pub const GROUP_V1: &str = "inference.networking.k8s.io";
/// The experimental API group of v1alpha2 pools.
pub const GROUP_V1ALPHA2: &str = "inference.networking.x-k8s.io";
/// Most target ports a pool may list (GIE v1.5).
pub const MAX_TARGET_PORTS: usize = 8;

/// Which pool to follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRef {
    /// Pool name (`--pool-name`).
    pub name: String,
    /// Pool namespace (`--pool-namespace`).
    pub namespace: String,
    /// API group (`--pool-group`).
    pub group: String,
}

impl PoolRef {
    /// The served version of the group: `v1` for the stable group, `v1alpha2` for x-k8s.io.
    pub fn version(&self) -> Result<&'static str, K8sError> {
        match self.group.as_str() {
            GROUP_V1 => Ok("v1"),
            GROUP_V1ALPHA2 => Ok("v1alpha2"),
            other => Err(K8sError::UnsupportedPoolGroup(other.to_string())),
        }
    }

    /// The InferencePool kind of the pool's group and version.
    pub fn api_resource(&self) -> Result<ApiResource, K8sError> {
        let version = self.version()?;
        Ok(ApiResource {
            group: self.group.clone(),
            version: version.into(),
            api_version: format!("{}/{version}", self.group),
            kind: "InferencePool".into(),
            plural: "inferencepools".into(),
        })
    }
}

/// What discovery needs from a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Pods must carry all of these labels.
    pub selector: BTreeMap<String, String>,
    /// Serving ports, index = rank.
    pub target_ports: Vec<u16>,
}

impl PoolSpec {
    /// The selector in `labelSelector` syntax (`k=v,k2=v2`; empty selects every pod).
    pub fn label_selector(&self) -> String {
        self.selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }
}

#[derive(Deserialize)]
struct RawPool {
    #[serde(default)]
    spec: RawSpec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    selector: Option<serde_json::Value>,
    #[serde(default)]
    target_ports: Vec<RawPort>,
    target_port_number: Option<i64>,
}

#[derive(Deserialize)]
struct RawPort {
    number: i64,
}

/// Reads the selector and ports of a pool object; an error says what is unusable.
pub fn parse_pool(object: &serde_json::Value) -> Result<PoolSpec, K8sError> {
    parse_pool_fields(object).map_err(|message| K8sError::Decode { what: "InferencePool", message })
}

fn parse_pool_fields(object: &serde_json::Value) -> Result<PoolSpec, String> {
    let raw = RawPool::deserialize(object).map_err(|e| format!("pool spec: {e}"))?;
    let selector = match raw.spec.selector {
        None => BTreeMap::new(),
        // v1: a LabelSelector; only matchLabels is part of the API.
        Some(serde_json::Value::Object(map)) if map.contains_key("matchLabels") || map.is_empty() => {
            labels(map.get("matchLabels").cloned().unwrap_or_default())?
        }
        // v1alpha2: a plain label map.
        Some(v) => labels(v)?,
    };
    let mut ports: Vec<i64> = raw.spec.target_ports.iter().map(|p| p.number).collect();
    if ports.is_empty()
        && let Some(n) = raw.spec.target_port_number
    {
        ports.push(n);
    }
    if ports.is_empty() {
        return Err("pool has no spec.targetPorts".into());
    }
    if ports.len() > MAX_TARGET_PORTS {
        return Err(format!("pool lists {} target ports; at most {MAX_TARGET_PORTS}", ports.len()));
    }
    let mut target_ports = Vec::with_capacity(ports.len());
    for p in ports {
        let port = u16::try_from(p).ok().filter(|p| *p != 0).ok_or_else(|| format!("target port {p} out of range"))?;
        if target_ports.contains(&port) {
            return Err(format!("target port {port} listed twice"));
        }
        target_ports.push(port);
    }
    Ok(PoolSpec { selector, target_ports })
}

fn labels(v: serde_json::Value) -> Result<BTreeMap<String, String>, String> {
    if v.is_null() {
        return Ok(BTreeMap::new());
    }
    serde_json::from_value(v).map_err(|e| format!("pool selector: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_v1_pools() {
        let pool = json!({"spec": {"selector": {"matchLabels": {"app": "vllm", "tier": "a"}},
            "targetPorts": [{"number": 8000}, {"number": 8001}], "endpointPickerRef": {"name": "epp"}}});
        let spec = parse_pool(&pool).unwrap();
        assert_eq!(spec.target_ports, [8000, 8001]);
        assert_eq!(spec.label_selector(), "app=vllm,tier=a");
    }

    #[test]
    fn parses_v1alpha2_pools() {
        let pool = json!({"spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000}});
        let spec = parse_pool(&pool).unwrap();
        assert_eq!(spec.target_ports, [8000]);
        assert_eq!(spec.selector.get("app").map(String::as_str), Some("vllm"));
    }

    #[test]
    fn rejects_unusable_ports() {
        for spec in [
            json!({"spec": {"selector": {"matchLabels": {}}}}),
            json!({"spec": {"targetPorts": [{"number": 70000}]}}),
            json!({"spec": {"targetPorts": [{"number": 1}, {"number": 1}]}}),
            json!({"spec": {"targetPorts": "x"}}),
        ] {
            assert!(parse_pool(&spec).is_err(), "{spec}");
        }
    }

    #[test]
    fn group_selects_the_version() {
        let mut r = PoolRef { name: "p".into(), namespace: "ns".into(), group: GROUP_V1.into() };
        let api = r.api_resource().unwrap();
        assert_eq!((api.api_version.as_str(), api.kind.as_str()), ("inference.networking.k8s.io/v1", "InferencePool"));
        r.group = GROUP_V1ALPHA2.into();
        assert_eq!(r.version().unwrap(), "v1alpha2");
        r.group = "example.com".into();
        assert!(matches!(r.version(), Err(K8sError::UnsupportedPoolGroup(_))));
    }
}
