//! LIST then WATCH of one collection on kube-runtime's `watcher` (paged LIST, WATCH from the
//! listed `resourceVersion` with bookmarks, resume from the last version when a watch ends,
//! relist on 410 Gone) with jittered exponential backoff between failures. Objects are passed
//! on untyped (`serde_json::Value`, kept as the API server sent them) on a bounded channel;
//! the consumer turns them into its own types. A LIST is delivered whole ([`WatchEvent::Listed`],
//! replacing everything known before), so consumers never see a half-listed state.
//! Failures are counted by reason and retried, never fatal. Runs until cancelled or until
//! the consumer drops its receiver.

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::metrics::K8sMetrics;

/// One collection to follow.
#[derive(Clone, Debug)]
pub struct WatchTarget {
    /// Group, version, kind and plural of the objects.
    pub api: ApiResource,
    /// Namespace of a namespaced kind; `None` = cluster-scoped (or all namespaces).
    pub namespace: Option<String>,
    /// `labelSelector` (`k=v,k2=v2`), if any.
    pub label_selector: Option<String>,
    /// `fieldSelector` (`metadata.name=x`), if any.
    pub field_selector: Option<String>,
    /// Value of the `resource` metric label.
    pub resource: String,
}

/// Retry and timeout settings.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// First delay after a failure (doubles, with jitter, up to `max_backoff`; reset by the
    /// next success).
    pub initial_backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
    /// Server-side watch duration (`timeoutSeconds`); the watch is then resumed.
    pub timeout_seconds: u32,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self { initial_backoff: Duration::from_millis(500), max_backoff: Duration::from_secs(30), timeout_seconds: 290 }
    }
}

impl WatchOptions {
    fn backoff(&self) -> watcher::ExponentialBackoff {
        backon::ExponentialBuilder::default()
            .with_min_delay(self.initial_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .into()
    }
}

/// What the consumer receives.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// A LIST completed: the complete current state (replaces everything known before).
    Listed(Vec<Value>),
    /// An object was added or modified.
    Applied(Value),
    /// An object was deleted (its last state).
    Deleted(Value),
}

/// Follows `target`, sending events to `tx` until `cancel` fires or `tx` is closed.
pub async fn run(
    client: kube::Client,
    target: WatchTarget,
    options: WatchOptions,
    metrics: K8sMetrics,
    tx: mpsc::Sender<WatchEvent>,
    cancel: CancellationToken,
) {
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &target.api),
        None => Api::all_with(client, &target.api),
    };
    let mut config = watcher::Config::default().timeout(options.timeout_seconds);
    if let Some(s) = &target.label_selector {
        config = config.labels(s);
    }
    if let Some(s) = &target.field_selector {
        config = config.fields(s);
    }
    let stream = watcher(api, config).backoff(options.backoff());
    let mut stream = std::pin::pin!(stream);
    let resource = target.resource.as_str();
    let mut listing: Option<Vec<Value>> = None;
    let mut failing = false;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            next = stream.next() => next,
        };
        let event = match next {
            None => return,
            Some(Err(error)) => {
                let reason = failure_reason(&error);
                metrics.failures.with_label_values(&[resource, reason]).inc();
                if reason == "gone" {
                    info!(resource, "Watch expired (410 Gone); relisting");
                } else if !failing {
                    warn!(resource, %error, "Kubernetes watch failing; retrying with backoff");
                    failing = true;
                } else {
                    debug!(resource, %error, "Kubernetes watch still failing");
                }
                continue;
            }
            Some(Ok(event)) => event,
        };
        if std::mem::take(&mut failing) {
            info!(resource, "Kubernetes watch recovered");
        }
        let out = match event {
            Event::Init => {
                listing = Some(Vec::new());
                continue;
            }
            Event::InitApply(object) => {
                metrics.events.with_label_values(&[resource, "listed"]).inc();
                if let Some(items) = listing.as_mut() {
                    items.push(untyped(object));
                }
                continue;
            }
            Event::InitDone => {
                metrics.lists.with_label_values(&[resource]).inc();
                WatchEvent::Listed(listing.take().unwrap_or_default())
            }
            Event::Apply(object) => {
                metrics.events.with_label_values(&[resource, "applied"]).inc();
                WatchEvent::Applied(untyped(object))
            }
            Event::Delete(object) => {
                metrics.events.with_label_values(&[resource, "deleted"]).inc();
                WatchEvent::Deleted(untyped(object))
            }
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// kube's watcher with an untyped object type (every kind goes through the same path).
fn watcher(
    api: Api<DynamicObject>,
    config: watcher::Config,
) -> impl tokio_stream::Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send {
    watcher::watcher(api, config)
}

/// The object as JSON (the shape the API server sent: `apiVersion`, `kind`, `metadata`, rest).
fn untyped(object: DynamicObject) -> Value {
    // Serialising a DynamicObject (ObjectMeta + a JSON map) cannot fail; Null is never seen.
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// The `reason` label of a failure: gone | status | connect | decode | body.
pub fn failure_reason(error: &watcher::Error) -> &'static str {
    match error {
        watcher::Error::WatchError(status) if status.code == 410 => "gone",
        watcher::Error::WatchError(_) => "status",
        watcher::Error::NoResourceVersion => "body",
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            client_failure_reason(e)
        }
    }
}

/// The `reason` label of a kube client error.
pub fn client_failure_reason(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) if status.code == 410 => "gone",
        kube::Error::Api(_) => "status",
        kube::Error::SerdeError(_) => "decode",
        kube::Error::ReadEvents(_) | kube::Error::LinesCodecMaxLineLengthExceeded => "body",
        _ => "connect",
    }
}
