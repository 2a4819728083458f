//! Object notifications for `k8s-notification-source`: resolves a group/version/kind to its
//! collection through API discovery (`/api/v1` or `/apis/<group>/<version>`), follows it with
//! LIST + WATCH (namespaced kinds in the pool namespace, cluster-scoped kinds everywhere) and
//! turns the events into typed [`Notification`]s on a broadcast channel. Like GIE's binding
//! (controller-runtime with a ResourceVersionChanged predicate) an update whose
//! `resourceVersion` did not change is not delivered; after a relist, objects that vanished
//! are delivered as deletions and unchanged ones are not repeated.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::KubeHandle;
use super::client::ClientError;
use super::watch::{self, WatchEvent, WatchTarget};

/// Group, version and kind of the watched objects (`group` empty for the core API).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gvk {
    /// API group (`""` = core).
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Kind (`ConfigMap`).
    pub kind: String,
}

impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}, Kind={}", self.version, self.kind)
        } else {
            write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
        }
    }
}

impl Gvk {
    /// The discovery path of the group version.
    pub fn discovery_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotificationKind {
    /// Created or changed (GIE `EventAddOrUpdate`).
    AddOrUpdate,
    /// Deleted (GIE `EventDelete`); the object is its last known state.
    Delete,
}

impl NotificationKind {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddOrUpdate => "add_or_update",
            Self::Delete => "delete",
        }
    }
}

/// One delivered event.
#[derive(Clone, Debug)]
pub struct Notification {
    /// What happened.
    pub kind: NotificationKind,
    /// The watched kind.
    pub gvk: Arc<Gvk>,
    /// The object as the API server sent it (unstructured).
    pub object: Arc<Value>,
}

impl Notification {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct ResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    kind: String,
    #[serde(default)]
    namespaced: bool,
}

/// The collection path of `gvk` from an APIResourceList body; `None` when the kind is absent.
pub fn collection_from_discovery(gvk: &Gvk, body: &[u8], namespace: &str) -> Result<Option<String>, String> {
    let list: ResourceList = serde_json::from_slice(body).map_err(|e| format!("API discovery: {e}"))?;
    let found = list.resources.iter().find(|r| r.kind == gvk.kind && !r.name.contains('/'));
    Ok(found.map(|r| {
        if r.namespaced {
            format!("{}/namespaces/{namespace}/{}", gvk.discovery_path(), r.name)
        } else {
            format!("{}/{}", gvk.discovery_path(), r.name)
        }
    }))
}

/// Follows `gvk` and broadcasts notifications on `tx` until `cancel` fires. `plugin_name`
/// labels the metric.
pub async fn run(
    kube: KubeHandle,
    gvk: Arc<Gvk>,
    plugin_name: Arc<str>,
    tx: broadcast::Sender<Notification>,
    cancel: CancellationToken,
) {
    let Some((collection, resource)) = resolve(&kube, &gvk, &cancel).await else { return };
    info!(plugin = %plugin_name, gvk = %gvk, %collection, "Watching objects for notifications");
    let target = WatchTarget { collection, label_selector: None, field_selector: None, resource: resource.clone() };
    let (events_tx, mut events) = mpsc::channel(64);
    let child = cancel.child_token();
    tokio::spawn(watch::run(kube.client.clone(), target, kube.options, kube.metrics.clone(), events_tx, child.clone()));
    let mut known: HashMap<(String, String), String> = HashMap::new();
    let deliver = |kind: NotificationKind, object: Value| {
        kube.metrics.notifications.with_label_values(&[&*plugin_name, resource.as_str(), kind.as_str()]).inc();
        // No subscriber is not an error: the event is counted and dropped.
        let _ = tx.send(Notification { kind, gvk: gvk.clone(), object: Arc::new(object) });
    };
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => break,
            e = events.recv() => match e { Some(e) => e, None => break },
        };
        match event {
            WatchEvent::Listed(items) => {
                let mut seen = HashMap::with_capacity(items.len());
                for o in items {
                    let (key, version) = identity(&o);
                    if known.get(&key) != Some(&version) {
                        deliver(NotificationKind::AddOrUpdate, o);
                    }
                    seen.insert(key, version);
                }
                for (key, _) in known.iter().filter(|(k, _)| !seen.contains_key(*k)) {
                    let object = serde_json::json!({"metadata": {"namespace": key.0, "name": key.1}});
                    deliver(NotificationKind::Delete, object);
                }
                known = seen;
            }
            WatchEvent::Applied(o) => {
                let (key, version) = identity(&o);
                if known.get(&key) != Some(&version) {
                    known.insert(key, version);
                    deliver(NotificationKind::AddOrUpdate, o);
                }
            }
            WatchEvent::Deleted(o) => {
                known.remove(&identity(&o).0);
                deliver(NotificationKind::Delete, o);
            }
        }
    }
    child.cancel();
}

fn identity(o: &Value) -> ((String, String), String) {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    ((s("/metadata/namespace"), s("/metadata/name")), s("/metadata/resourceVersion"))
}

/// Resolves the collection, retrying with backoff (the CRD may be installed later).
async fn resolve(kube: &KubeHandle, gvk: &Gvk, cancel: &CancellationToken) -> Option<(String, String)> {
    let mut delay = kube.options.initial_backoff;
    let mut warned = false;
    let path = gvk.discovery_path();
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = kube.client.get(&path) => r,
        };
        let outcome = result
            .map_err(|e: ClientError| e.to_string())
            .and_then(|body| collection_from_discovery(gvk, &body, &kube.namespace));
        match outcome {
            Ok(Some(collection)) => {
                let resource = collection.rsplit('/').next().unwrap_or_default().to_string();
                return Some((collection, resource));
            }
            Ok(None) | Err(_) => {
                kube.metrics.failures.with_label_values(&["discovery", "status"]).inc();
                if !warned {
                    let error = outcome.err().unwrap_or_else(|| format!("kind {} is not served", gvk.kind));
                    warn!(gvk = %gvk, %error, "Cannot resolve the watched kind; retrying");
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(kube.options.max_backoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_maps_kinds_to_collections() {
        let body = br#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
            {"name":"pods","kind":"Pod","namespaced":true},{"name":"pods/status","kind":"Pod","namespaced":true},
            {"name":"nodes","kind":"Node","namespaced":false}]}"#;
        let pod = Gvk { group: String::new(), version: "v1".into(), kind: "Pod".into() };
        assert_eq!(collection_from_discovery(&pod, body, "ns").unwrap().as_deref(), Some("/api/v1/namespaces/ns/pods"));
        let node = Gvk { kind: "Node".into(), ..pod.clone() };
        assert_eq!(collection_from_discovery(&node, body, "ns").unwrap().as_deref(), Some("/api/v1/nodes"));
        let missing = Gvk { kind: "Widget".into(), ..pod.clone() };
        assert_eq!(collection_from_discovery(&missing, body, "ns").unwrap(), None);
        assert!(collection_from_discovery(&pod, b"{", "ns").is_err());
        let crd = Gvk { group: "example.com".into(), version: "v1".into(), kind: "W".into() };
        assert_eq!(crd.discovery_path(), "/apis/example.com/v1");
    }
}
