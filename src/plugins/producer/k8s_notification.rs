//! `k8s-notification-source` (GIE data layer, stable): watches the Kubernetes objects of one
//! group/version/kind and delivers add/update and delete notifications to subscribers.
//!
//! Parameters: `group` (API group, default `""` = core), `version` (required, e.g. `v1`),
//! `kind` (required, e.g. `ConfigMap`). Namespaced kinds are watched in the pool namespace,
//! cluster-scoped kinds cluster-wide. One source per GVK (a second one is a config error, as
//! in GIE). Consumers (extractors) get a typed stream with
//! [`K8sNotificationSource::subscribe`]; other plugins reach the instance through the
//! `notification_source` role of `PluginInstance`. Each delivered event is counted in
//! `epp_k8s_notifications_total{plugin_name, resource, event}`. Without Kubernetes access
//! (no `--pool-name`, `--kubeconfig` or in-cluster environment) the source logs once at
//! startup and delivers nothing, like GIE's file-discovery mode.

use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::broadcast;
use tracing::warn;

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::{
    BackgroundService, NotificationSource, PluginInstance, PluginName, ServiceContext, ServiceFuture, ServiceStartError,
};
use crate::k8s::notify::{self, Gvk, Notification};

/// Registered type name.
pub const TYPE: &str = "k8s-notification-source";

/// Notifications a slow subscriber may fall behind before it sees `Lagged`.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// API group (`""` for core objects).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

/// The runtime source: a GVK and the broadcast channel its watch feeds.
#[derive(Debug)]
pub struct K8sNotificationSource {
    name: PluginName,
    gvk: Arc<Gvk>,
    tx: broadcast::Sender<Notification>,
}

impl K8sNotificationSource {
    /// A source for `gvk` named `name` (not started).
    pub fn new(name: PluginName, gvk: Gvk) -> Self {
        let (tx, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        Self { name, gvk: Arc::new(gvk), tx }
    }

    /// The watched kind.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// A stream of every notification from now on, in watch order. A subscriber more than
    /// [`SUBSCRIBER_BUFFER`] events behind receives `RecvError::Lagged` and should resync.
    pub fn subscribe(&self) -> broadcast::Receiver<Notification> {
        self.tx.subscribe()
    }
}

impl NotificationSource for K8sNotificationSource {
    fn gvk(&self) -> &Gvk {
        K8sNotificationSource::gvk(self)
    }

    fn subscribe(&self) -> broadcast::Receiver<Notification> {
        K8sNotificationSource::subscribe(self)
    }
}

impl BackgroundService for K8sNotificationSource {
    fn start(&self, cx: ServiceContext) -> ServiceFuture<'_, Result<(), ServiceStartError>> {
        Box::pin(async move {
            match cx.kube {
                Some(kube) => {
                    let task = notify::run(kube, self.gvk.clone(), self.name.clone(), self.tx.clone(), cx.cancel);
                    tokio::spawn(task);
                }
                None => warn!(plugin = %self.name, gvk = %self.gvk,
                    "k8s-notification-source has no Kubernetes access (no --pool-name, --kubeconfig or in-cluster config); it delivers nothing"),
            }
            Ok(())
        })
    }

    fn flush(&self) -> ServiceFuture<'_, ()> {
        // Events are delivered synchronously by the watch task; nothing is queued here.
        Box::pin(async {})
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let path = |field: &str| format!("{}.parameters.{field}", spec.path);
    if p.version.is_empty() {
        return Err(BuildError::new(path("version"), "is required (e.g. v1)"));
    }
    if p.kind.is_empty() {
        return Err(BuildError::new(path("kind"), "is required (e.g. ConfigMap)"));
    }
    let gvk = Gvk { group: p.group, version: p.version, kind: p.kind };
    if let Some(other) = cx.earlier.iter().find(|i| i.notification_source.as_ref().is_some_and(|s| *s.gvk() == gvk)) {
        return Err(BuildError::new(
            &spec.path,
            format!("plugin {:?} already watches {gvk}; one notification source per kind", &*other.name),
        ));
    }
    let source = Arc::new(K8sNotificationSource::new(spec.name.clone(), gvk));
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_background(source.clone())
        .with_notification_source(source)
        .passive())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(params: serde_json::Value) -> PluginSpec {
        PluginSpec { name: "src".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() }
    }

    #[test]
    fn decodes_gvk_strictly() {
        let inst =
            build(&spec(json!({"group": "", "version": "v1", "kind": "ConfigMap"})), &BuildContext::default()).unwrap();
        let src = inst.notification_source.as_ref().unwrap();
        assert_eq!(src.gvk().to_string(), "v1, Kind=ConfigMap");
        assert!(inst.background.is_some());
        let err = build(&spec(json!({"version": "v1"})), &BuildContext::default()).unwrap_err();
        assert_eq!(err.path, "plugins[0].parameters.kind");
        let err = build(&spec(serde_json::Value::Null), &BuildContext::default()).unwrap_err();
        assert_eq!(err.path, "plugins[0].parameters.version");
        let err = build(&spec(json!({"version": "v1", "kind": "Pod", "namespace": "x"})), &BuildContext::default());
        assert_eq!(err.unwrap_err().path, "plugins[0].parameters");
    }

    #[test]
    fn one_source_per_kind() {
        let first = build(&spec(json!({"version": "v1", "kind": "Pod"})), &BuildContext::default()).unwrap();
        let cx = BuildContext { earlier: vec![first], ..Default::default() };
        let mut second = spec(json!({"version": "v1", "kind": "Pod"}));
        second.path = "plugins[1]".into();
        assert_eq!(build(&second, &cx).unwrap_err().path, "plugins[1]");
        assert!(build(&spec(json!({"version": "v1", "kind": "Service"})), &cx).is_ok());
    }
}
