//! Object notifications for `k8s-notification-source`: resolves a group/version/kind to its
//! resource through API discovery (`/api/v1` or `/apis/<group>/<version>`), follows it with
//! kube's watcher (namespaced kinds in the pool namespace, cluster-scoped kinds everywhere) and
//! turns the events into typed [`Notification`]s on a broadcast channel. Like GIE's binding
//! (controller-runtime with a ResourceVersionChanged predicate) an update whose
//! `resourceVersion` did not change is not delivered; after a relist, objects that vanished
//! are delivered as deletions and unchanged ones are not repeated.

use std::collections::HashMap;
use std::sync::Arc;

use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::KubeHandle;
use super::error::K8sError;
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

/// Follows `gvk` and broadcasts notifications on `tx` until `cancel` fires. `plugin_name`
/// labels the metric.
pub async fn run(
    kube: KubeHandle,
    gvk: Arc<Gvk>,
    plugin_name: Arc<str>,
    tx: broadcast::Sender<Notification>,
    cancel: CancellationToken,
) {
    let Some((api, scope)) = resolve(&kube, &gvk, &cancel).await else { return };
    let resource = api.plural.clone();
    let namespace = match scope {
        Scope::Namespaced => Some(kube.namespace.clone()),
        Scope::Cluster => None,
    };
    info!(plugin = %plugin_name, gvk = %gvk, %resource, namespace = ?namespace, "Watching objects for notifications");
    let target = WatchTarget { api, namespace, label_selector: None, field_selector: None, resource: resource.clone() };
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

/// Resolves the kind through API discovery, retrying with backoff (the CRD may be installed
/// later).
async fn resolve(kube: &KubeHandle, gvk: &Gvk, cancel: &CancellationToken) -> Option<(ApiResource, Scope)> {
    let mut delay = kube.options.initial_backoff;
    let mut warned = false;
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = kube::discovery::pinned_kind(&kube.client, &wanted) => r,
        };
        match result {
            Ok((api, capabilities)) => return Some((api, capabilities.scope)),
            Err(error) => {
                let error = K8sError::Api(error);
                kube.metrics.failures.with_label_values(&["discovery", "status"]).inc();
                if !warned {
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
