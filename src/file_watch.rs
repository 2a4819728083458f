//! Polling change detection for files that are replaced while the process runs (serving
//! certificates, the endpoints file, the EndpointPickerConfig): a [`ContentWatch`] re-reads its
//! source on a fixed period and yields only when the content hash differs from the last one
//! seen. Polling by content (not inotify, not mtime) follows every way Kubernetes updates a
//! mounted ConfigMap or Secret (the `..data` symlink swap), plain rewrites and editors that
//! write a new file and rename it.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// What a poll found.
#[derive(Debug)]
pub enum Change<T, E> {
    /// The content differs from the last content seen.
    Changed(T),
    /// The source could not be read (reported once per run of failures).
    Unreadable(E),
}

/// A source polled every period, yielding changes of its content.
pub struct ContentWatch<T, E> {
    read: Box<dyn FnMut() -> Result<T, E> + Send>,
    ticks: tokio::time::Interval,
    last: Option<u64>,
    failing: bool,
}

impl<T, E> std::fmt::Debug for ContentWatch<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentWatch").field("last", &self.last).field("failing", &self.failing).finish()
    }
}

/// The hash content is compared by (stable within the process).
pub fn content_hash<T: Hash + ?Sized>(content: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    content.hash(&mut hasher);
    hasher.finish()
}

impl<T: Hash, E> ContentWatch<T, E> {
    /// Polls `read` every `period`; `current` is the content already in use (no change is
    /// reported until the source differs from it).
    pub fn new(period: Duration, current: Option<&T>, read: impl FnMut() -> Result<T, E> + Send + 'static) -> Self {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { read: Box::new(read), ticks, last: current.map(content_hash), failing: false }
    }

    /// Waits for the next change; `None` once `cancel` fired. A content that was rejected by
    /// the caller is not reported again until it changes once more.
    pub async fn next(&mut self, cancel: &CancellationToken) -> Option<Change<T, E>> {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = self.ticks.tick() => {}
            }
            match (self.read)() {
                Ok(content) => {
                    self.failing = false;
                    let hash = content_hash(&content);
                    if self.last != Some(hash) {
                        self.last = Some(hash);
                        return Some(Change::Changed(content));
                    }
                }
                Err(error) if !self.failing => {
                    self.failing = true;
                    return Some(Change::Unreadable(error));
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn yields_changes_once_and_failures_once_per_run() {
        let source: Arc<Mutex<Result<String, &'static str>>> = Arc::new(Mutex::new(Ok("a".into())));
        let s = source.clone();
        let initial = "a".to_string();
        let mut watch = ContentWatch::new(Duration::from_secs(1), Some(&initial), move || {
            s.lock().map_err(|_| "poisoned")?.clone()
        });
        let cancel = CancellationToken::new();
        let set = |v: Result<&str, &'static str>| *source.lock().unwrap() = v.map(str::to_string);

        set(Ok("b"));
        assert!(matches!(watch.next(&cancel).await, Some(Change::Changed(b)) if b == "b"));
        set(Err("gone"));
        assert!(matches!(watch.next(&cancel).await, Some(Change::Unreadable("gone"))));
        // Back to the content seen last: no change; then a new one.
        set(Ok("b"));
        let quiet = tokio::time::timeout(Duration::from_secs(5), watch.next(&cancel)).await;
        assert!(quiet.is_err(), "unchanged content is not reported");
        set(Ok("c"));
        assert!(matches!(watch.next(&cancel).await, Some(Change::Changed(c)) if c == "c"));
        cancel.cancel();
        assert!(watch.next(&cancel).await.is_none());
    }
}
