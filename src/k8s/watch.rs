//! LIST then WATCH of one collection, the way client-go's reflector does it: LIST gives the
//! full state and a `resourceVersion`; WATCH from that version streams ADDED / MODIFIED /
//! DELETED / BOOKMARK / ERROR events (newline-delimited JSON). A watch that ends is resumed
//! from the last seen version; 410 Gone (as a status or an ERROR event) forces a relist;
//! failures back off exponentially. Objects are passed on untyped (`serde_json::Value`) on a
//! bounded channel; the consumer turns them into its own types. Bad lines are counted and
//! skipped, never fatal. Runs until cancelled or until the consumer drops its receiver.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::client::{ApiClient, ClientError};
use super::metrics::K8sMetrics;

/// One collection to follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchTarget {
    /// Collection path, e.g. `/api/v1/namespaces/ns/pods`.
    pub collection: String,
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
    /// First delay after a failure (doubles up to `max_backoff`).
    pub initial_backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
    /// Server-side watch duration (`timeoutSeconds`); the client gives up on a silent
    /// connection 30 s after it.
    pub timeout_seconds: u32,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self { initial_backoff: Duration::from_millis(500), max_backoff: Duration::from_secs(30), timeout_seconds: 300 }
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

#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: RawListMeta,
    #[serde(default)]
    items: Vec<Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawListMeta {
    #[serde(default)]
    resource_version: String,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: Value,
}

/// How one watch connection ended.
enum Ended {
    /// The server closed the stream; `saw_events` = at least one line arrived.
    Closed { saw_events: bool },
    /// 410 Gone: relist (after a backoff when this connection delivered nothing, so a
    /// server answering 410 to every fresh version cannot make us spin).
    Gone { saw_events: bool },
    /// A failure; resume from the last version after a backoff.
    Failed(ClientError),
    /// The consumer is gone.
    Stopped,
}

/// Follows `target`, sending events to `tx` until `cancel` fires or `tx` is closed.
pub async fn run(
    client: ApiClient,
    target: WatchTarget,
    options: WatchOptions,
    metrics: K8sMetrics,
    tx: mpsc::Sender<WatchEvent>,
    cancel: CancellationToken,
) {
    let mut w = Watcher { client, target, options, metrics, tx, failing: false, delay: options.initial_backoff };
    'relist: loop {
        let listed = tokio::select! {
            _ = cancel.cancelled() => return,
            r = w.list() => r,
        };
        let mut version = match listed {
            Ok((items, version)) => {
                w.metrics.lists.with_label_values(&[&w.target.resource]).inc();
                if w.tx.send(WatchEvent::Listed(items)).await.is_err() {
                    return;
                }
                w.recovered();
                version
            }
            Err(error) => {
                w.failed(&error);
                if !w.backoff(&cancel).await {
                    return;
                }
                continue;
            }
        };
        loop {
            let ended = tokio::select! {
                _ = cancel.cancelled() => return,
                e = w.watch_once(&mut version) => e,
            };
            match ended {
                Ended::Stopped => return,
                Ended::Gone { saw_events } => {
                    w.metrics.failures.with_label_values(&[&w.target.resource, "gone"]).inc();
                    info!(resource = %w.target.resource, "Watch expired (410 Gone); relisting");
                    if !saw_events && !w.backoff(&cancel).await {
                        return;
                    }
                    continue 'relist;
                }
                Ended::Closed { saw_events: true } => w.recovered(),
                // A server that closes at once every time must not make us spin.
                Ended::Closed { saw_events: false } => {
                    if !w.backoff(&cancel).await {
                        return;
                    }
                }
                Ended::Failed(error) => {
                    w.failed(&error);
                    if !w.backoff(&cancel).await {
                        return;
                    }
                }
            }
        }
    }
}

struct Watcher {
    client: ApiClient,
    target: WatchTarget,
    options: WatchOptions,
    metrics: K8sMetrics,
    tx: mpsc::Sender<WatchEvent>,
    failing: bool,
    delay: Duration,
}

impl Watcher {
    fn query(&self, extra: &[(&str, &str)]) -> String {
        let mut params: Vec<(&str, &str)> = extra.to_vec();
        if let Some(s) = &self.target.label_selector {
            params.push(("labelSelector", s));
        }
        if let Some(s) = &self.target.field_selector {
            params.push(("fieldSelector", s));
        }
        let mut q = self.target.collection.clone();
        for (i, (k, v)) in params.iter().enumerate() {
            q.push(if i == 0 { '?' } else { '&' });
            q.push_str(k);
            q.push('=');
            q.push_str(&encode_query_value(v));
        }
        q
    }

    async fn list(&self) -> Result<(Vec<Value>, String), ClientError> {
        let body = self.client.get(&self.query(&[])).await?;
        let list: RawList = serde_json::from_slice(&body).map_err(|e| ClientError::Body(format!("LIST: {e}")))?;
        Ok((list.items, list.metadata.resource_version))
    }

    async fn watch_once(&self, version: &mut String) -> Ended {
        let timeout = self.options.timeout_seconds.to_string();
        let path = self.query(&[
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", &timeout),
        ]);
        let mut lines = match self.client.watch(&path).await {
            Ok(l) => l,
            Err(e) if e.is_gone() => return Ended::Gone { saw_events: false },
            Err(e) => return Ended::Failed(e),
        };
        let idle = Duration::from_secs(u64::from(self.options.timeout_seconds) + 30);
        let mut saw_events = false;
        // Object events (not bookmarks or errors) on this connection.
        let mut events = 0u64;
        loop {
            let line = match tokio::time::timeout(idle, lines.next_line()).await {
                Err(_) => return Ended::Failed(ClientError::Timeout),
                Ok(Err(e)) => return Ended::Failed(e),
                Ok(Ok(None)) => return Ended::Closed { saw_events },
                Ok(Ok(Some(line))) => line,
            };
            saw_events = true;
            let event: RawEvent = match serde_json::from_slice(&line) {
                Ok(e) => e,
                Err(error) => {
                    self.metrics.failures.with_label_values(&[&self.target.resource, "decode"]).inc();
                    debug!(resource = %self.target.resource, %error, "Undecodable watch line skipped");
                    continue;
                }
            };
            let kind = event.kind.to_ascii_lowercase();
            if matches!(kind.as_str(), "added" | "modified" | "deleted" | "bookmark" | "error") {
                self.metrics.events.with_label_values(&[&self.target.resource, &kind]).inc();
            }
            if kind == "error" {
                let code = event.object.get("code").and_then(Value::as_u64).unwrap_or(0);
                if code == 410 {
                    return Ended::Gone { saw_events: events > 0 };
                }
                let message = event.object.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
                return Ended::Failed(ClientError::Status { status: code as u16, message });
            }
            if let Some(v) = event.object.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                *version = v.to_string();
            }
            let out = match kind.as_str() {
                "added" | "modified" => WatchEvent::Applied(event.object),
                "deleted" => WatchEvent::Deleted(event.object),
                _ => continue,
            };
            events += 1;
            if self.tx.send(out).await.is_err() {
                return Ended::Stopped;
            }
        }
    }

    fn failed(&mut self, error: &ClientError) {
        let reason = match error {
            ClientError::Connect(_) | ClientError::Config(_) => "connect",
            ClientError::Status { .. } => "status",
            ClientError::Timeout => "timeout",
            ClientError::Body(_) => "body",
        };
        self.metrics.failures.with_label_values(&[&self.target.resource, reason]).inc();
        if !self.failing {
            warn!(resource = %self.target.resource, %error, "Kubernetes watch failing; retrying with backoff");
            self.failing = true;
        }
    }

    fn recovered(&mut self) {
        if self.failing {
            info!(resource = %self.target.resource, "Kubernetes watch recovered");
            self.failing = false;
        }
        self.delay = self.options.initial_backoff;
    }

    /// Sleeps the current backoff (doubling it); `false` when cancelled meanwhile.
    async fn backoff(&mut self, cancel: &CancellationToken) -> bool {
        let d = self.delay;
        self.delay = (self.delay * 2).min(self.options.max_backoff);
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass through).
pub fn encode_query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_selectors() {
        assert_eq!(encode_query_value("app=vllm,llm-d.ai/role=decode"), "app%3Dvllm%2Cllm-d.ai%2Frole%3Ddecode");
    }
}
