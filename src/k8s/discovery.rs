//! InferencePool discovery: watches the pool object (field selector `metadata.name=<pool>`)
//! and the pods its selector matches (label selector, in the pool namespace), and publishes
//! the resulting endpoints to the [`EndpointStore`] exactly like the endpoints file does, so
//! scrapers and KV-event subscriptions follow. A selector change restarts the pod watch; a
//! deleted (or deleting) pool empties the store; an unusable pool spec is counted and the
//! previous endpoints are kept. Runs until cancelled.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::error::K8sError;
use super::metrics::K8sMetrics;
use super::pod::{PodInfo, parse_pod, pod_endpoints};
use super::pool::{PoolRef, PoolSpec, parse_pool};
use super::watch::{WatchEvent, WatchOptions, WatchTarget, run as run_watch};
use crate::endpoints::model::Endpoint;
use crate::endpoints::store::EndpointStore;

/// Buffer between a watch task and the discovery loop.
const CHANNEL: usize = 64;

/// Everything discovery needs.
#[derive(Clone)]
pub struct PoolDiscovery {
    /// API client.
    pub client: kube::Client,
    /// The pool to follow.
    pub pool: PoolRef,
    /// Where endpoints are published.
    pub store: EndpointStore,
    /// Retry settings of both watches.
    pub options: WatchOptions,
    /// Metric handles.
    pub metrics: K8sMetrics,
    /// Barrier: counts watch events (pool or pods, a LIST counting as one) whose result has
    /// been published to the store.
    pub progress: watch::Sender<u64>,
    /// Set to `true` once the pool is known and its pods have been listed and published
    /// (readiness waits for it).
    pub synced: watch::Sender<bool>,
}

impl std::fmt::Debug for PoolDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolDiscovery").field("pool", &self.pool).finish_non_exhaustive()
    }
}

struct PodWatch {
    selector: String,
    cancel: CancellationToken,
    events: mpsc::Receiver<WatchEvent>,
}

#[derive(Default)]
struct State {
    pool: Option<PoolSpec>,
    pods: BTreeMap<String, PodInfo>,
    /// The current pod watch has delivered its LIST.
    pods_listed: bool,
}

impl PoolDiscovery {
    /// Follows the pool until `cancel` fires. Fails at once only when the pool group is not
    /// supported.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), K8sError> {
        let pool_target = WatchTarget {
            api: self.pool.api_resource()?,
            namespace: Some(self.pool.namespace.clone()),
            label_selector: None,
            field_selector: Some(format!("metadata.name={}", self.pool.name)),
            resource: "inferencepools".into(),
        };
        let (pool_tx, pool_rx) = mpsc::channel(CHANNEL);
        let watches = cancel.child_token();
        tokio::spawn(run_watch(
            self.client.clone(),
            pool_target,
            self.options,
            self.metrics.clone(),
            pool_tx,
            watches.clone(),
        ));
        self.follow(Some(pool_rx), State::default(), None, watches, cancel).await;
        Ok(())
    }

    /// Standalone mode (`--endpoint-selector`): no InferencePool; `spec` stands in for one
    /// (selector and target ports) and only the pods are watched. `self.pool` names the
    /// namespace (its name is used in logs only).
    pub async fn run_standalone(self, spec: PoolSpec, cancel: CancellationToken) {
        let watches = cancel.child_token();
        let pods = Some(self.watch_pods(spec.label_selector(), &watches));
        let state = State { pool: Some(spec), ..State::default() };
        self.follow(None, state, pods, watches, cancel).await;
    }

    async fn follow(
        &self,
        mut pool_rx: Option<mpsc::Receiver<WatchEvent>>,
        mut state: State,
        mut pods: Option<PodWatch>,
        watches: CancellationToken,
        cancel: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                event = next_event(&mut pool_rx) => match event {
                    Some(event) => self.on_pool_event(event, &mut state, &mut pods, &watches),
                    None => break,
                },
                event = next_pod_event(&mut pods) => match event {
                    Some(event) => self.on_pod_event(event, &mut state),
                    None => pods = None,
                },
            }
            self.publish(&state);
            if state.pool.is_some() && state.pods_listed {
                self.synced.send_if_modified(|synced| !std::mem::replace(synced, true));
            }
            self.progress.send_modify(|n| *n += 1);
        }
        watches.cancel();
    }

    fn on_pool_event(
        &self,
        event: WatchEvent,
        state: &mut State,
        pods: &mut Option<PodWatch>,
        parent: &CancellationToken,
    ) {
        let object = match event {
            WatchEvent::Listed(items) => items.into_iter().find(|o| name_of(o) == Some(self.pool.name.as_str())),
            WatchEvent::Applied(o) if name_of(&o) == Some(self.pool.name.as_str()) => Some(o),
            WatchEvent::Deleted(o) if name_of(&o) == Some(self.pool.name.as_str()) => None,
            _ => return,
        };
        let object = object.filter(|o| o.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null));
        let Some(object) = object else {
            if state.pool.take().is_some() {
                info!(pool = %self.pool.name, "InferencePool not found. Clearing the datastore");
            }
            state.pods.clear();
            if let Some(w) = pods.take() {
                w.cancel.cancel();
            }
            return;
        };
        let spec = match parse_pool(&object) {
            Ok(spec) => spec,
            Err(error) => {
                self.metrics.failures.with_label_values(&["inferencepools", "decode"]).inc();
                warn!(pool = %self.pool.name, %error, "InferencePool unusable; keeping the previous endpoints");
                return;
            }
        };
        let selector = spec.label_selector();
        if pods.as_ref().is_none_or(|w| w.selector != selector) {
            if let Some(w) = pods.take() {
                w.cancel.cancel();
            }
            info!(pool = %self.pool.name, %selector, ports = ?spec.target_ports, "Updating endpoints");
            state.pods_listed = false;
            *pods = Some(self.watch_pods(selector, parent));
        }
        state.pool = Some(spec);
    }

    fn watch_pods(&self, selector: String, parent: &CancellationToken) -> PodWatch {
        let target = WatchTarget {
            api: pod_resource(),
            namespace: Some(self.pool.namespace.clone()),
            label_selector: (!selector.is_empty()).then(|| selector.clone()),
            field_selector: None,
            resource: "pods".into(),
        };
        let (tx, events) = mpsc::channel(CHANNEL);
        let cancel = parent.child_token();
        tokio::spawn(run_watch(self.client.clone(), target, self.options, self.metrics.clone(), tx, cancel.clone()));
        PodWatch { selector, cancel, events }
    }

    fn on_pod_event(&self, event: WatchEvent, state: &mut State) {
        match event {
            WatchEvent::Listed(items) => {
                state.pods_listed = true;
                state.pods.clear();
                for o in items {
                    if let Some(p) = self.parse(&o) {
                        state.pods.insert(p.name.clone(), p);
                    }
                }
            }
            WatchEvent::Applied(o) => {
                if let Some(p) = self.parse(&o) {
                    state.pods.insert(p.name.clone(), p);
                }
            }
            WatchEvent::Deleted(o) => {
                if let Some(name) = name_of(&o) {
                    state.pods.remove(name);
                }
            }
        }
    }

    fn parse(&self, object: &Value) -> Option<PodInfo> {
        match parse_pod(object) {
            Ok(p) => Some(p),
            Err(error) => {
                self.metrics.failures.with_label_values(&["pods", "decode"]).inc();
                warn!(pod = name_of(object).unwrap_or("?"), %error, "Pod object skipped");
                None
            }
        }
    }

    fn publish(&self, state: &State) {
        let endpoints: Vec<Endpoint> = match &state.pool {
            Some(pool) => state.pods.values().flat_map(|p| pod_endpoints(p, pool)).collect(),
            None => Vec::new(),
        };
        let ready = state.pods.values().filter(|p| p.ready && p.ip.is_some()).count();
        self.metrics.ready_pods.set(ready as i64);
        self.metrics.endpoints.set(endpoints.len() as i64);
        let diff = self.store.replace(endpoints);
        diff.log();
        if !diff.is_empty() {
            info!(pool = %self.pool.name, added = ?diff.added, updated = ?diff.updated, removed = ?diff.removed,
                "Pool endpoints changed");
        }
    }
}

async fn next_event(events: &mut Option<mpsc::Receiver<WatchEvent>>) -> Option<WatchEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_pod_event(pods: &mut Option<PodWatch>) -> Option<WatchEvent> {
    match pods {
        Some(w) => w.events.recv().await,
        None => std::future::pending().await,
    }
}

/// The core `v1` Pod kind.
fn pod_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

fn name_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}
