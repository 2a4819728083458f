//! The queues of Flow Control, without tasks: priority bands (highest first), each holding
//! one ordered queue per flow (fairness id). `push` enforces the global and per-band limits;
//! `pop_next` takes the next request of the highest-priority non-empty band, choosing the
//! flow by the band's fairness policy and the request by its ordering policy; `remove`
//! takes a request out early (TTL expiry, client cancel). Time is read only to stamp arrivals
//! and to tell a stateful fairness policy how long the head requests waited. Generic over
//! the payload so the controller can park a waiter in each entry and tests can use plain
//! values.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::time::Instant;

use super::policy::FlowView;
use super::settings::{BandSettings, Fairness, FlowControlSettings, Ordering};

/// Identifies a queued request.
pub type EntryId = u64;

/// One queued request.
#[derive(Debug)]
pub struct Entry<T> {
    /// Id (unique per `Queues`).
    pub id: EntryId,
    /// Fairness id of its flow.
    pub flow: String,
    /// Priority of its band.
    pub priority: i32,
    /// Size counted against `maxBytes`.
    pub bytes: u64,
    /// When it expires (`None` = never).
    pub deadline: Option<Instant>,
    /// Arrival + TTFT SLO (`slo-deadline-ordering-policy`; `None` = no SLO).
    pub slo_deadline: Option<Instant>,
    /// When it was queued.
    pub enqueued: Instant,
    /// Caller's data.
    pub payload: T,
}

impl<T> Entry<T> {
    /// Sort key under `ordering`: smaller goes first.
    fn key(&self, ordering: Ordering) -> (bool, Option<Instant>, EntryId) {
        match ordering {
            Ordering::Fcfs => (false, None, self.id),
            // A deadline sorts before none; ties by arrival.
            Ordering::Edf => (self.deadline.is_none(), self.deadline, self.id),
            Ordering::SloDeadline => (self.slo_deadline.is_none(), self.slo_deadline, self.id),
        }
    }
}

/// A request to queue, besides its payload.
#[derive(Clone, Copy, Debug)]
pub struct Arrival<'a> {
    /// Fairness id.
    pub flow: &'a str,
    /// Priority.
    pub priority: i32,
    /// Size counted against `maxBytes`.
    pub bytes: u64,
    /// Queue TTL deadline (`None` = never expires).
    pub deadline: Option<Instant>,
    /// SLO deadline for `slo-deadline-ordering-policy` (`None` = no SLO).
    pub slo_deadline: Option<Instant>,
}

/// Why a request was not queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    /// A global limit (`flowControl.maxBytes` / `maxRequests`) is reached.
    #[error("flow control queue is full (global {0} limit)")]
    Global(&'static str),
    /// The band's limit is reached.
    #[error("flow control queue is full (priority {priority} band {limit} limit)")]
    Band {
        /// Band priority.
        priority: i32,
        /// `maxBytes` or `maxRequests`.
        limit: &'static str,
    },
}

#[derive(Debug)]
struct Band<T> {
    settings: BandSettings,
    flows: HashMap<String, VecDeque<Entry<T>>>,
    /// Round-robin turn order of the non-empty flows.
    turns: VecDeque<String>,
    bytes: u64,
    requests: u64,
}

impl<T> Band<T> {
    fn new(settings: BandSettings) -> Self {
        Self { settings, flows: HashMap::new(), turns: VecDeque::new(), bytes: 0, requests: 0 }
    }

    fn insert(&mut self, entry: Entry<T>) {
        let ordering = self.settings.ordering;
        let flow = match self.flows.get_mut(&entry.flow) {
            Some(f) => f,
            None => {
                self.turns.push_back(entry.flow.clone());
                self.flows.entry(entry.flow.clone()).or_default()
            }
        };
        let key = entry.key(ordering);
        let at = flow.partition_point(|e| e.key(ordering) <= key);
        self.bytes += entry.bytes;
        self.requests += 1;
        flow.insert(at, entry);
    }

    /// The flow to serve next under the band's fairness policy.
    fn next_flow(&self, now: Instant) -> Option<String> {
        match &self.settings.fairness {
            Fairness::RoundRobin => self.turns.front().cloned(),
            Fairness::GlobalStrict => {
                let ordering = self.settings.ordering;
                self.flows
                    .iter()
                    .filter_map(|(name, q)| q.front().map(|e| (e.key(ordering), name)))
                    .min()
                    .map(|(_, name)| name.clone())
            }
            Fairness::Policy(policy) => {
                let mut views: Vec<FlowView<'_>> = self
                    .flows
                    .iter()
                    .filter_map(|(id, q)| q.front().map(|h| FlowView { id, len: q.len(), head_enqueued: h.enqueued }))
                    .collect();
                // Sorted, so a policy's tie-breaking does not depend on hash order.
                views.sort_unstable_by(|a, b| a.id.cmp(b.id));
                let at = policy.pick(&views, now);
                views.get(at).or(views.first()).map(|v| v.id.to_string())
            }
        }
    }

    fn pop(&mut self) -> Option<Entry<T>> {
        let now = Instant::now();
        let flow = self.next_flow(now)?;
        let queue = self.flows.get_mut(&flow)?;
        let entry = queue.pop_front()?;
        if let Fairness::Policy(policy) = &self.settings.fairness {
            policy.dispatched(&flow, now.saturating_duration_since(entry.enqueued));
        }
        let now_empty = queue.is_empty();
        if let Some(pos) = self.turns.iter().position(|f| *f == flow) {
            self.turns.remove(pos);
        }
        if now_empty {
            self.flows.remove(&flow);
        } else {
            // Served: to the back of the round-robin order.
            self.turns.push_back(flow);
        }
        self.account_removed(&entry);
        Some(entry)
    }

    fn remove(&mut self, flow: &str, id: EntryId) -> Option<Entry<T>> {
        let queue = self.flows.get_mut(flow)?;
        let pos = queue.iter().position(|e| e.id == id)?;
        let entry = queue.remove(pos)?;
        if queue.is_empty() {
            self.flows.remove(flow);
            self.turns.retain(|f| f != flow);
        }
        self.account_removed(&entry);
        Some(entry)
    }

    fn account_removed(&mut self, entry: &Entry<T>) {
        self.bytes -= entry.bytes;
        self.requests -= 1;
    }
}

/// What one priority band holds (`/debug/state`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BandLoad {
    /// The band's priority.
    pub priority: i32,
    /// Requests waiting.
    pub requests: u64,
    /// Bytes of the waiting requests' bodies.
    pub bytes: u64,
    /// Flows (fairness ids) with a waiting request.
    pub flows: usize,
}

/// All bands of one pool.
#[derive(Debug)]
pub struct Queues<T> {
    settings: FlowControlSettings,
    bands: BTreeMap<Reverse<i32>, Band<T>>,
    bytes: u64,
    requests: u64,
    next_id: EntryId,
}

impl<T> Queues<T> {
    /// Empty queues under `settings`.
    pub fn new(settings: FlowControlSettings) -> Self {
        Self { settings, bands: BTreeMap::new(), bytes: 0, requests: 0, next_id: 0 }
    }

    /// Queued requests.
    pub fn len(&self) -> u64 {
        self.requests
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.requests == 0
    }

    /// Queued bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Per priority band (highest first): what waits in it now. Bands that never held a
    /// request are absent.
    pub fn bands(&self) -> Vec<BandLoad> {
        self.bands
            .iter()
            .map(|(Reverse(priority), band)| BandLoad {
                priority: *priority,
                requests: band.requests,
                bytes: band.bytes,
                flows: band.flows.len(),
            })
            .collect()
    }

    /// Queues a request without an SLO deadline, or reports the limit it would exceed.
    pub fn push(
        &mut self,
        flow: &str,
        priority: i32,
        bytes: u64,
        deadline: Option<Instant>,
        payload: T,
    ) -> Result<EntryId, CapacityError> {
        self.push_arrival(Arrival { flow, priority, bytes, deadline, slo_deadline: None }, payload)
    }

    /// Queues a request, or reports the limit it would exceed.
    pub fn push_arrival(&mut self, arrival: Arrival<'_>, payload: T) -> Result<EntryId, CapacityError> {
        let Arrival { flow, priority, bytes, deadline, slo_deadline } = arrival;
        let over = |limit: Option<u64>, now: u64, add: u64| limit.is_some_and(|l| now + add > l);
        if over(self.settings.max_requests, self.requests, 1) {
            return Err(CapacityError::Global("maxRequests"));
        }
        if over(self.settings.max_bytes, self.bytes, bytes) {
            return Err(CapacityError::Global("maxBytes"));
        }
        let band_settings = self.settings.band(priority).clone();
        let band = self.bands.entry(Reverse(priority)).or_insert_with(|| Band::new(band_settings));
        if over(band.settings.max_requests, band.requests, 1) {
            return Err(CapacityError::Band { priority, limit: "maxRequests" });
        }
        if over(band.settings.max_bytes, band.bytes, bytes) {
            return Err(CapacityError::Band { priority, limit: "maxBytes" });
        }
        let id = self.next_id;
        self.next_id += 1;
        let enqueued = Instant::now();
        band.insert(Entry { id, flow: flow.to_string(), priority, bytes, deadline, slo_deadline, enqueued, payload });
        self.bytes += bytes;
        self.requests += 1;
        Ok(id)
    }

    /// Priority of the highest non-empty band.
    pub fn head_priority(&self) -> Option<i32> {
        self.bands.iter().find(|(_, b)| b.requests > 0).map(|(p, _)| p.0)
    }

    /// Takes the next request to dispatch (strict priority across bands).
    pub fn pop_next(&mut self) -> Option<Entry<T>> {
        let entry = self.bands.values_mut().find(|b| b.requests > 0)?.pop()?;
        self.account_removed(&entry);
        Some(entry)
    }

    /// Takes a specific request out (expiry, cancel); `None` when it already left.
    pub fn remove(&mut self, priority: i32, flow: &str, id: EntryId) -> Option<Entry<T>> {
        let entry = self.bands.get_mut(&Reverse(priority))?.remove(flow, id)?;
        self.account_removed(&entry);
        Some(entry)
    }

    fn account_removed(&mut self, entry: &Entry<T>) {
        self.bytes -= entry.bytes;
        self.requests -= 1;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn queues(fairness: Fairness) -> Queues<&'static str> {
        let band = BandSettings { fairness, ..BandSettings::default() };
        Queues::new(FlowControlSettings { default_band: band, ..FlowControlSettings::default() })
    }

    fn drain<T: Copy>(q: &mut Queues<T>) -> Vec<T> {
        let mut out = Vec::new();
        for _ in 0..q.len() {
            out.extend(q.pop_next().map(|e| e.payload));
        }
        out
    }

    #[test]
    fn higher_priority_bands_go_first_then_arrival_order() {
        let mut q = queues(Fairness::GlobalStrict);
        for (flow, priority, name) in
            [("a", 0, "a0"), ("b", -1, "b-1"), ("a", 10, "a10"), ("b", 0, "b0"), ("a", 0, "a0'")]
        {
            q.push(flow, priority, 1, None, name).unwrap();
        }
        let load = |priority, requests, flows| BandLoad { priority, requests, bytes: requests, flows };
        assert_eq!(q.bands(), [load(10, 1, 1), load(0, 3, 2), load(-1, 1, 1)], "highest priority first");
        assert_eq!(q.head_priority(), Some(10));
        assert_eq!(drain(&mut q), ["a10", "a0", "b0", "a0'", "b-1"]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
        assert!(q.bands().iter().all(|b| b.requests == 0 && b.bytes == 0 && b.flows == 0), "{:?}", q.bands());
    }

    #[test]
    fn round_robin_alternates_flows_while_global_strict_keeps_arrival_order() {
        let arrivals = [("heavy", "h1"), ("heavy", "h2"), ("heavy", "h3"), ("light", "l1"), ("light", "l2")];
        let mut rr = queues(Fairness::RoundRobin);
        let mut strict = queues(Fairness::GlobalStrict);
        for (flow, name) in arrivals {
            rr.push(flow, 0, 1, None, name).unwrap();
            strict.push(flow, 0, 1, None, name).unwrap();
        }
        assert_eq!(drain(&mut rr), ["h1", "l1", "h2", "l2", "h3"]);
        assert_eq!(drain(&mut strict), ["h1", "h2", "h3", "l1", "l2"]);
    }

    #[test]
    fn edf_serves_the_earliest_deadline_and_deadline_free_requests_last() {
        let band = BandSettings { ordering: Ordering::Edf, ..BandSettings::default() };
        let mut q = Queues::new(FlowControlSettings { default_band: band, ..FlowControlSettings::default() });
        let now = Instant::now();
        q.push("f", 0, 1, None, "none").unwrap();
        q.push("f", 0, 1, Some(now + Duration::from_secs(9)), "late").unwrap();
        q.push("g", 0, 1, Some(now + Duration::from_secs(1)), "soon").unwrap();
        assert_eq!(drain(&mut q), ["soon", "late", "none"]);
    }

    #[test]
    fn slo_deadline_serves_the_tightest_slo_first_and_slo_free_requests_last() {
        let band = BandSettings { ordering: Ordering::SloDeadline, ..BandSettings::default() };
        let mut q = Queues::new(FlowControlSettings { default_band: band, ..FlowControlSettings::default() });
        let now = Instant::now();
        let at = |ms| Some(now + Duration::from_millis(ms));
        let arrive = |flow, slo_deadline| Arrival { flow, priority: 0, bytes: 1, deadline: at(1), slo_deadline };
        // The queue TTL deadline (`deadline`) plays no part; only the SLO deadline does.
        q.push_arrival(arrive("f", None), "no-slo").unwrap();
        q.push_arrival(arrive("f", at(900)), "loose").unwrap();
        q.push_arrival(arrive("g", at(100)), "tight").unwrap();
        q.push_arrival(arrive("g", at(900)), "loose-later").unwrap();
        q.push_arrival(arrive("f", None), "no-slo-later").unwrap();
        assert_eq!(drain(&mut q), ["tight", "loose", "loose-later", "no-slo", "no-slo-later"]);
    }

    #[test]
    fn limits_reject_without_changing_the_queue() {
        let mut settings = FlowControlSettings { max_requests: Some(3), ..FlowControlSettings::default() };
        settings.bands.push((5, BandSettings { max_bytes: Some(100), ..BandSettings::default() }));
        let mut q = Queues::new(settings);
        q.push("f", 5, 60, None, ()).unwrap();
        assert_eq!(q.push("f", 5, 41, None, ()), Err(CapacityError::Band { priority: 5, limit: "maxBytes" }));
        q.push("f", 5, 40, None, ()).unwrap();
        q.push("f", 0, 1, None, ()).unwrap();
        assert_eq!(q.push("f", 0, 1, None, ()), Err(CapacityError::Global("maxRequests")));
        assert_eq!((q.len(), q.bytes()), (3, 101));
    }

    #[test]
    fn remove_takes_one_entry_and_keeps_the_rest_in_order() {
        let mut q = queues(Fairness::RoundRobin);
        let a = q.push("a", 0, 7, None, "a").unwrap();
        q.push("b", 0, 1, None, "b").unwrap();
        assert_eq!(q.remove(0, "a", a).map(|e| e.payload), Some("a"));
        assert!(q.remove(0, "a", a).is_none(), "already gone");
        assert!(q.remove(3, "b", 1).is_none(), "no such band");
        assert_eq!((q.len(), q.bytes()), (1, 1));
        assert_eq!(drain(&mut q), ["b"]);
    }
}
