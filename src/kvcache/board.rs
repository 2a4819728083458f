//! What the KV-event side looks like right now, for `/debug/state`: the SUB sockets
//! ([`SubscriptionBoard`]: endpoint or central socket, connected, age of the last message)
//! and the prefix indexes whose per-endpoint sizes are read on demand ([`IndexBoard`]).
//! Shared through [`super::KvCacheMetrics`] so the app reads what the subscribers write
//! without holding them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::index::PrefixIndex;

/// One SUB socket's live state. Updated by its receive task; read by snapshots.
#[derive(Debug)]
pub struct Subscription {
    /// The endpoint it follows (`None`: the central bound socket, all endpoints).
    pub endpoint: Option<Arc<str>>,
    /// Where it dials (pod discovery) or is bound (central).
    pub socket: String,
    /// Publishers connected to it.
    peers: AtomicU64,
    /// Milliseconds after the board's epoch of the last message, plus one (0: never).
    last_message: AtomicU64,
    epoch: Instant,
}

impl Subscription {
    /// Records a publisher connection.
    pub fn peer_connected(&self) {
        self.peers.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a publisher disconnection.
    pub fn peer_disconnected(&self) {
        let _ = self.peers.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Records a received message.
    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis().min(u128::from(u64::MAX - 1)) as u64;
        self.last_message.store(ms + 1, Ordering::Relaxed);
    }

    fn last_message_age(&self, now: Instant) -> Option<Duration> {
        let stamp = self.last_message.load(Ordering::Relaxed).checked_sub(1)?;
        Some(now.saturating_duration_since(self.epoch + Duration::from_millis(stamp)))
    }
}

/// Removes its subscription from the board when the receive task ends.
#[derive(Debug)]
pub struct Registration {
    board: Weak<Mutex<HashMap<u64, Arc<Subscription>>>>,
    key: u64,
    /// The registered subscription.
    pub state: Arc<Subscription>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(board) = self.board.upgrade() {
            lock(&board).remove(&self.key);
        }
    }
}

/// One subscription as `/debug/state` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubscriptionView {
    /// Endpoint followed (`null`: the central bound socket).
    pub endpoint: Option<String>,
    /// Dialled or bound address.
    pub socket: String,
    /// At least one publisher connected.
    pub connected: bool,
    /// Publishers connected (a connecting socket has at most one).
    pub peers: u64,
    /// Seconds since the last message (`null`: none yet).
    pub last_message_age_seconds: Option<f64>,
}

/// The live SUB sockets; clones share one board.
#[derive(Clone, Debug)]
pub struct SubscriptionBoard {
    entries: Arc<Mutex<HashMap<u64, Arc<Subscription>>>>,
    next: Arc<AtomicU64>,
    epoch: Instant,
}

impl Default for SubscriptionBoard {
    fn default() -> Self {
        Self { entries: Arc::default(), next: Arc::default(), epoch: Instant::now() }
    }
}

impl SubscriptionBoard {
    /// Adds a socket (not connected, no message yet); it leaves the board when the returned
    /// registration is dropped.
    pub fn register(&self, endpoint: Option<Arc<str>>, socket: String) -> Registration {
        let state = Arc::new(Subscription {
            endpoint,
            socket,
            peers: AtomicU64::new(0),
            last_message: AtomicU64::new(0),
            epoch: self.epoch,
        });
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.entries).insert(key, state.clone());
        Registration { board: Arc::downgrade(&self.entries), key, state }
    }

    /// Every socket, ordered by endpoint then socket (the central socket first).
    pub fn snapshot(&self) -> Vec<SubscriptionView> {
        let now = Instant::now();
        let mut out: Vec<SubscriptionView> = lock(&self.entries)
            .values()
            .map(|s| SubscriptionView {
                endpoint: s.endpoint.as_deref().map(str::to_owned),
                socket: s.socket.clone(),
                connected: s.peers.load(Ordering::Relaxed) > 0,
                peers: s.peers.load(Ordering::Relaxed),
                last_message_age_seconds: s.last_message_age(now).map(|d| d.as_secs_f64()),
            })
            .collect();
        out.sort_by(|a, b| (&a.endpoint, &a.socket).cmp(&(&b.endpoint, &b.socket)));
        out
    }
}

/// The prefix indexes of the running config (weakly held: an index replaced by a reload
/// drops out); clones share one board.
#[derive(Clone, Debug, Default)]
pub struct IndexBoard {
    indexes: Arc<Mutex<Vec<Weak<PrefixIndex>>>>,
}

impl IndexBoard {
    /// Tracks `index` (once, however often it is offered).
    pub fn track(&self, index: &Arc<PrefixIndex>) {
        let mut indexes = lock(&self.indexes);
        indexes.retain(|w| w.strong_count() > 0);
        if !indexes.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(index))) {
            indexes.push(Arc::downgrade(index));
        }
    }

    /// Blocks held per endpoint, summed over the live indexes; every endpoint an index
    /// knows is listed (0 when it holds nothing). One pass over each index's tables.
    pub fn blocks_by_endpoint(&self) -> BTreeMap<String, u64> {
        let live: Vec<Arc<PrefixIndex>> = lock(&self.indexes).iter().filter_map(Weak::upgrade).collect();
        let mut out = BTreeMap::new();
        for index in live {
            for (endpoint, blocks) in index.blocks_by_endpoint() {
                *out.entry(endpoint.to_string()).or_insert(0) += blocks;
            }
        }
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one insert, remove or retain: a panicking holder leaves a valid value.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_leave_with_their_registration() {
        let board = SubscriptionBoard::default();
        let central = board.register(None, "tcp://127.0.0.1:5557".into());
        let pod = board.register(Some("pod".into()), "tcp://10.0.0.1:5557".into());
        pod.state.peer_connected();
        pod.state.touch();
        central.state.peer_connected();
        central.state.peer_disconnected();
        central.state.peer_disconnected();
        let views = board.snapshot();
        assert_eq!(views.len(), 2);
        assert_eq!((views[0].endpoint.as_deref(), views[0].connected), (None, false));
        assert_eq!(views[0].last_message_age_seconds, None);
        assert_eq!((views[1].endpoint.as_deref(), views[1].connected), (Some("pod"), true));
        assert!(views[1].last_message_age_seconds.is_some_and(|a| a < 60.0));
        drop(pod);
        assert_eq!(board.snapshot().len(), 1);
        drop(central);
        assert!(board.snapshot().is_empty());
    }
}
