//! Pods to endpoints, following GIE's datastore rules: a pod counts when it is Ready
//! (`PodReady=True`), has a pod IP and is not being deleted; it yields one endpoint per
//! active target port, named `<pod>-rank-<index>` with `rank = index` into the pool's
//! `targetPorts`, the pod IP as address, the target port as serving and metrics port, and the
//! pod's labels. The `llm-d.ai/active-ports` annotation (or GIE's
//! `inference.networking.k8s.io/active-ports`) restricts which target ports are active.
//! Pure; no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

use super::error::K8sError;
use super::pool::PoolSpec;
use crate::endpoints::model::Endpoint;

/// llm-d's active-ports annotation (comma-separated port numbers).
pub const ACTIVE_PORTS_ANNOTATION: &str = "llm-d.ai/active-ports";
/// GIE's active-ports annotation (read when the llm-d one is absent).
pub const GIE_ACTIVE_PORTS_ANNOTATION: &str = "inference.networking.k8s.io/active-ports";

/// What discovery keeps of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// Pod IP, when assigned.
    pub ip: Option<IpAddr>,
    /// `PodReady=True` and no deletion timestamp.
    pub ready: bool,
    /// Active ports from the annotation; `None` = every target port.
    pub active_ports: Option<Vec<u16>>,
}

#[derive(Deserialize)]
struct RawPod {
    metadata: RawMeta,
    #[serde(default)]
    status: RawStatus,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    deletion_timestamp: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(default)]
    conditions: Vec<RawCondition>,
}

#[derive(Deserialize)]
struct RawCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

/// Reads a pod object; an error says which field is malformed.
pub fn parse_pod(object: &serde_json::Value) -> Result<PodInfo, K8sError> {
    parse_pod_fields(object).map_err(|message| K8sError::Decode { what: "Pod", message })
}

fn parse_pod_fields(object: &serde_json::Value) -> Result<PodInfo, String> {
    let raw = RawPod::deserialize(object).map_err(|e| format!("pod: {e}"))?;
    let ready_condition = raw.status.conditions.iter().any(|c| c.kind == "Ready" && c.status == "True");
    let ip = raw.status.pod_ip.as_deref().filter(|s| !s.is_empty()).and_then(|s| s.parse().ok());
    let annotation = raw
        .metadata
        .annotations
        .get(ACTIVE_PORTS_ANNOTATION)
        .or_else(|| raw.metadata.annotations.get(GIE_ACTIVE_PORTS_ANNOTATION));
    let active_ports = annotation.map(|v| v.split(',').filter_map(|p| p.trim().parse::<u16>().ok()).collect());
    Ok(PodInfo {
        name: raw.metadata.name,
        labels: raw.metadata.labels,
        ip,
        ready: ready_condition && raw.metadata.deletion_timestamp.is_none(),
        active_ports,
    })
}

/// The endpoints of one pod under `pool` (empty when the pod is not eligible).
pub fn pod_endpoints(pod: &PodInfo, pool: &PoolSpec) -> Vec<Endpoint> {
    let Some(ip) = pod.ip.filter(|_| pod.ready) else { return Vec::new() };
    if !pool.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v)) {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(pool.target_ports.len());
    for (rank, &port) in pool.target_ports.iter().enumerate() {
        if pod.active_ports.as_ref().is_some_and(|active| !active.contains(&port)) {
            continue;
        }
        let mut e = Endpoint::new(format!("{}-rank-{rank}", pod.name), ip, port);
        e.labels = pod.labels.clone();
        e.rank = rank as u16;
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ready: &str, ip: Option<&str>) -> serde_json::Value {
        json!({"metadata": {"name": "vllm-0", "labels": {"app": "vllm", "llm-d.ai/role": "decode"}},
               "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]}})
    }

    fn pool(ports: &[u16]) -> PoolSpec {
        PoolSpec { selector: [("app".to_string(), "vllm".to_string())].into(), target_ports: ports.to_vec() }
    }

    #[test]
    fn ready_pods_yield_one_endpoint_per_rank() {
        let p = parse_pod(&pod("True", Some("10.0.0.7"))).unwrap();
        let eps = pod_endpoints(&p, &pool(&[8000, 8001]));
        let ids: Vec<_> = eps.iter().map(|e| (&*e.id, e.port, e.rank, e.metrics_port)).collect();
        assert_eq!(ids, [("vllm-0-rank-0", 8000, 0, 8000), ("vllm-0-rank-1", 8001, 1, 8001)]);
        assert_eq!(eps[0].label("llm-d.ai/role"), Some("decode"));
        assert_eq!(&*eps[1].host_port, "10.0.0.7:8001");
    }

    #[test]
    fn unready_ipless_deleting_and_unmatched_pods_yield_nothing() {
        assert!(pod_endpoints(&parse_pod(&pod("False", Some("10.0.0.7"))).unwrap(), &pool(&[8000])).is_empty());
        assert!(pod_endpoints(&parse_pod(&pod("True", None)).unwrap(), &pool(&[8000])).is_empty());
        let mut deleting = pod("True", Some("10.0.0.7"));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(pod_endpoints(&parse_pod(&deleting).unwrap(), &pool(&[8000])).is_empty());
        let mut other = pool(&[8000]);
        other.selector.insert("app".into(), "sglang".into());
        assert!(pod_endpoints(&parse_pod(&pod("True", Some("10.0.0.7"))).unwrap(), &other).is_empty());
    }

    #[test]
    fn active_ports_annotation_restricts_ranks() {
        let mut p = pod("True", Some("fd00::7"));
        p["metadata"]["annotations"] = json!({GIE_ACTIVE_PORTS_ANNOTATION: "8001"});
        let eps = pod_endpoints(&parse_pod(&p).unwrap(), &pool(&[8000, 8001]));
        assert_eq!(eps.len(), 1);
        assert_eq!((&*eps[0].id, eps[0].rank, &*eps[0].host_port), ("vllm-0-rank-1", 1, "[fd00::7]:8001"));
    }

    #[test]
    fn malformed_pods_are_errors() {
        assert!(parse_pod(&json!({"metadata": {}})).is_err());
        assert!(parse_pod(&json!({"metadata": {"name": "x", "labels": {"a": 1}}})).is_err());
    }
}
