//! Applies what other replicas published: takes a stream entry (skipping this replica's own
//! from the header alone), routes each run of decoded [`Message`]s for one plugin instance to
//! the [`SharedState`] registered under its name in one call, skips stale in-flight updates,
//! keeps track of which peers are alive and makes plugins forget a peer silent for three
//! heartbeats. Counts every outcome once per entry; `applied()` is a barrier for tests and
//! tools.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::{Received, SyncMetrics};
use super::wire::{self, Body, DecodeError, Message};
use crate::framework::plugin::PluginName;
use crate::framework::replica::{Origin, Remote, SharedState, SharedUpdate};

/// Silent heartbeats after which a peer is forgotten.
pub const SILENT_BEATS: u32 = 3;

/// Remote messages applied so far, by kind (a barrier for tests and tools).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppliedCounts {
    /// Approximate-prefix entries.
    pub prefix: u64,
    /// Speculative entries.
    pub speculative: u64,
    /// In-flight deltas and totals.
    pub inflight: u64,
    /// Session bindings.
    pub sessions: u64,
    /// Heartbeats.
    pub heartbeats: u64,
}

impl AppliedCounts {
    fn count(&mut self, body: &Body) {
        let slot = match body {
            Body::Heartbeat => &mut self.heartbeats,
            Body::Update(SharedUpdate::PrefixRecorded { .. }) => &mut self.prefix,
            Body::Update(SharedUpdate::Speculative { .. }) => &mut self.speculative,
            Body::Update(SharedUpdate::InFlightDelta { .. } | SharedUpdate::InFlightTotals { .. }) => {
                &mut self.inflight
            }
            Body::Update(SharedUpdate::SessionBound { .. }) => &mut self.sessions,
        };
        *slot += 1;
    }

    fn add(&mut self, other: &AppliedCounts) {
        self.prefix += other.prefix;
        self.speculative += other.speculative;
        self.inflight += other.inflight;
        self.sessions += other.sessions;
        self.heartbeats += other.heartbeats;
    }
}

/// Outcomes of one batch, counted once at its end.
#[derive(Debug)]
struct Tally {
    outcomes: [(Received, u64); 4],
    applied: AppliedCounts,
}

impl Default for Tally {
    fn default() -> Self {
        let outcomes = [Received::Applied, Received::Own, Received::UnknownPlugin, Received::Stale].map(|o| (o, 0));
        Self { outcomes, applied: AppliedCounts::default() }
    }
}

impl Tally {
    fn count(&mut self, outcome: Received) {
        if let Some(slot) = self.outcomes.iter_mut().find(|(o, _)| *o == outcome) {
            slot.1 += 1;
        }
    }

    fn applied(&mut self, body: &Body) {
        self.count(Received::Applied);
        self.applied.count(body);
    }
}

/// The applier.
#[derive(Debug)]
pub struct Applier {
    replica: Arc<str>,
    heartbeat: Duration,
    states: RwLock<HashMap<PluginName, Weak<dyn SharedState>>>,
    peers: std::sync::Mutex<HashMap<Arc<str>, Instant>>,
    metrics: SyncMetrics,
    applied: watch::Sender<AppliedCounts>,
}

/// Milliseconds since the Unix epoch now (0 before 1970, which no clock here reports).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Applier {
    /// An applier for replica `replica` whose peers beat every `heartbeat`.
    pub fn new(replica: Arc<str>, heartbeat: Duration, metrics: SyncMetrics) -> Self {
        Self {
            replica,
            heartbeat,
            states: RwLock::default(),
            peers: std::sync::Mutex::default(),
            metrics,
            applied: watch::channel(AppliedCounts::default()).0,
        }
    }

    /// Registers the state of plugin instance `plugin` (a later registration replaces it).
    pub fn register(&self, plugin: PluginName, state: Weak<dyn SharedState>) {
        self.states.write().unwrap_or_else(|p| p.into_inner()).insert(plugin, state);
    }

    /// Live registered states.
    pub fn states(&self) -> Vec<(PluginName, Arc<dyn SharedState>)> {
        let states = self.states.read().unwrap_or_else(|p| p.into_inner());
        states.iter().filter_map(|(name, s)| s.upgrade().map(|s| (name.clone(), s))).collect()
    }

    /// Messages applied so far (changes on every applied message).
    pub fn applied(&self) -> watch::Receiver<AppliedCounts> {
        self.applied.subscribe()
    }

    /// Counts an undecodable entry (`None`: no `m` field) as one message.
    pub fn reject(&self, error: Option<DecodeError>) {
        let outcome = match error {
            Some(DecodeError::Version(_)) => Received::ForeignVersion,
            _ => Received::Malformed,
        };
        tracing::debug!(?error, "Replica sync: entry ignored");
        self.metrics.received(outcome, 1);
    }

    /// Handles one stream entry's `m` field (`None`: the entry has none). This replica's own
    /// entries are counted from their header alone; the others are decoded whole (a bad entry
    /// is skipped whole) and applied. `live` = read as it arrived (not during catch-up), for
    /// the lag.
    pub fn receive(&self, entry: Option<&[u8]>, live: bool) {
        let Some(bytes) = entry else { return self.reject(None) };
        match wire::header(bytes) {
            Err(error) => self.reject(Some(error)),
            Ok(head) if head.replica == &*self.replica => self.metrics.received(Received::Own, head.count as u64),
            Ok(_) => match wire::decode(bytes) {
                Ok(messages) => self.apply_batch(&messages, live),
                Err(error) => self.reject(Some(error)),
            },
        }
    }

    /// Applies one message (see [`Applier::apply_batch`]).
    pub fn apply(&self, message: &Message, live: bool) {
        self.apply_batch(std::slice::from_ref(message), live);
    }

    /// Applies `messages` in order: each run of consecutive updates for one plugin instance
    /// goes to its state in one call. Counts every outcome, records the lag of live updates
    /// and publishes the applied counts once.
    pub fn apply_batch(&self, messages: &[Message], live: bool) {
        let now = now_ms();
        let mut tally = Tally::default();
        self.note_peers(messages, now);
        let mut rest = messages;
        while let Some(first) = rest.first() {
            let run = rest.iter().take_while(|m| m.plugin == first.plugin).count();
            self.apply_run(&rest[..run], live, now, &mut tally);
            rest = &rest[run..];
        }
        for (outcome, n) in tally.outcomes {
            if n > 0 {
                self.metrics.received(outcome, n);
            }
        }
        if tally.applied != AppliedCounts::default() {
            self.applied.send_modify(|n| n.add(&tally.applied));
        }
    }

    fn age(&self, message: &Message, now: u64) -> Duration {
        Duration::from_millis(now.saturating_sub(message.published_ms))
    }

    fn fresh(&self, age: Duration) -> bool {
        age < self.heartbeat * SILENT_BEATS
    }

    /// Marks the replicas of fresh messages alive (one lock for the batch).
    fn note_peers(&self, messages: &[Message], now: u64) {
        let mut last: Option<&Arc<str>> = None;
        let mut peers = None;
        for m in messages {
            if m.replica == self.replica || last == Some(&m.replica) || !self.fresh(self.age(m, now)) {
                continue;
            }
            last = Some(&m.replica);
            let peers = peers.get_or_insert_with(|| self.peers.lock().unwrap_or_else(|p| p.into_inner()));
            peers.insert(m.replica.clone(), Instant::now());
        }
    }

    /// Applies a run of messages for one plugin instance.
    fn apply_run(&self, run: &[Message], live: bool, now: u64, tally: &mut Tally) {
        let state = self.states.read().unwrap_or_else(|p| p.into_inner()).get(&run[0].plugin).and_then(Weak::upgrade);
        let mut updates = Vec::with_capacity(run.len());
        for m in run {
            if m.replica == self.replica {
                tally.count(Received::Own);
                continue;
            }
            let age = self.age(m, now);
            let Body::Update(update) = &m.body else {
                tally.applied(&m.body);
                continue;
            };
            let in_flight = matches!(update, SharedUpdate::InFlightDelta { .. } | SharedUpdate::InFlightTotals { .. });
            if in_flight && !self.fresh(age) {
                tally.count(Received::Stale);
                continue;
            }
            if state.is_none() {
                tally.count(Received::UnknownPlugin);
                continue;
            }
            if live {
                self.metrics.lag.observe(age.as_secs_f64());
            }
            tally.applied(&m.body);
            updates.push(Remote { origin: Origin { replica: &m.replica, age }, update });
        }
        if let Some(state) = state.filter(|_| !updates.is_empty()) {
            state.apply_batch(&updates);
        }
    }

    /// Forgets peers silent for [`SILENT_BEATS`] heartbeats (their in-flight load drops) and
    /// updates the peers gauge. Called every heartbeat.
    pub fn expire_peers(&self) {
        let cutoff = self.heartbeat * SILENT_BEATS;
        let now = Instant::now();
        let gone: Vec<Arc<str>> = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let gone = peers.iter().filter(|(_, t)| now.saturating_duration_since(**t) >= cutoff);
            let gone: Vec<Arc<str>> = gone.map(|(r, _)| r.clone()).collect();
            for r in &gone {
                peers.remove(r);
            }
            self.metrics.peers.set(peers.len() as i64);
            gone
        };
        for replica in gone {
            tracing::info!(%replica, "Replica sync: peer silent, forgetting its in-flight load");
            for (_, state) in self.states() {
                state.forget_replica(&replica);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Recorder {
        seen: Mutex<Vec<(String, SharedUpdate)>>,
        forgotten: Mutex<Vec<String>>,
    }

    impl SharedState for Recorder {
        fn apply(&self, origin: Origin<'_>, update: &SharedUpdate) {
            self.seen.lock().unwrap().push((origin.replica.to_string(), update.clone()));
        }

        fn forget_replica(&self, replica: &str) {
            self.forgotten.lock().unwrap().push(replica.to_string());
        }
    }

    fn message(replica: &str, plugin: &str, published_ms: u64, update: SharedUpdate) -> Message {
        Message { replica: replica.into(), published_ms, plugin: plugin.into(), body: Body::Update(update) }
    }

    #[tokio::test(start_paused = true)]
    async fn routes_by_plugin_and_counts_every_outcome() {
        let metrics = SyncMetrics::register(&prometheus::Registry::new()).unwrap();
        let applier = Applier::new("me".into(), Duration::from_secs(1), metrics.clone());
        let recorder = Arc::new(Recorder::default());
        let state: Arc<dyn SharedState> = recorder.clone();
        applier.register("approx".into(), Arc::downgrade(&state));
        let bound = SharedUpdate::SessionBound { session: "s".into(), endpoint: "pod-a".into() };
        let delta = SharedUpdate::InFlightDelta { endpoint: "pod-a".into(), requests: 1, tokens: 2 };
        let now = now_ms();
        applier.apply(&message("peer", "approx", now, bound.clone()), true);
        applier.apply(&message("me", "approx", now, bound.clone()), true);
        applier.apply(&message("peer", "other", now, bound.clone()), true);
        applier.apply(&message("peer", "approx", now - 60_000, delta.clone()), false);
        applier.reject(Some(DecodeError::Version(9)));
        applier.reject(None);
        assert_eq!(*recorder.seen.lock().unwrap(), vec![("peer".to_string(), bound)]);
        for (outcome, n) in [
            (Received::Applied, 1),
            (Received::Own, 1),
            (Received::UnknownPlugin, 1),
            (Received::Stale, 1),
            (Received::ForeignVersion, 1),
            (Received::Malformed, 1),
        ] {
            assert_eq!(metrics.received_count(outcome), n, "{outcome:?}");
        }
        assert_eq!(metrics.lag.get_sample_count(), 1);
        assert_eq!(applier.applied().borrow().sessions, 1);

        applier.expire_peers();
        assert_eq!(metrics.peers.get(), 1);
        tokio::time::advance(Duration::from_secs(3)).await;
        applier.expire_peers();
        assert_eq!(metrics.peers.get(), 0);
        assert_eq!(*recorder.forgotten.lock().unwrap(), vec!["peer".to_string()]);
        drop(state);
        drop(recorder);
        applier.apply(&message("peer", "approx", now_ms(), delta), true);
        assert_eq!(metrics.received_count(Received::UnknownPlugin), 2, "a dropped plugin is unknown");
    }
}
