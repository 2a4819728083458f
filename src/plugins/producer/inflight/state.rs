//! The in-flight ledger: per-endpoint (requests, tokens) and, per request id, what was added
//! so it can be released exactly. Short critical sections under one std mutex; no await.
//! Duplicate request ids (clients may reuse `x-request-id`) queue up and release in order.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use prometheus::IntGaugeVec;

use crate::endpoints::model::EndpointId;

/// One addition: endpoint, tokens, and whether it may be released early (non-primary).
pub type Entry = (EndpointId, u64, bool);
/// What a release took off: endpoint, requests, tokens.
pub type Released = Vec<(EndpointId, u64, u64)>;

#[derive(Debug, Default)]
struct Inner {
    per_endpoint: HashMap<EndpointId, (u64, u64)>,
    pending: HashMap<String, VecDeque<Vec<Entry>>>,
}

/// `llm_d_epp_inflight_{requests,tokens}{endpoint_name, producer_name}`: one series per
/// endpoint with something in flight (endpoint ids only, so label values stay bounded by the
/// fleet); a series is removed when its endpoint drops to zero.
#[derive(Debug)]
pub struct Gauges {
    /// Requests gauge.
    pub requests: IntGaugeVec,
    /// Tokens gauge.
    pub tokens: IntGaugeVec,
    /// `producer_name` label value.
    pub producer: String,
}

impl Gauges {
    fn publish(&self, id: &str, load: Option<(u64, u64)>) {
        let labels = [id, self.producer.as_str()];
        match load {
            Some((r, t)) => {
                self.requests.with_label_values(&labels).set(i64::try_from(r).unwrap_or(i64::MAX));
                self.tokens.with_label_values(&labels).set(i64::try_from(t).unwrap_or(i64::MAX));
            }
            None => {
                // Absent series are fine: nothing was ever published for this endpoint.
                let _ = self.requests.remove_label_values(&labels);
                let _ = self.tokens.remove_label_values(&labels);
            }
        }
    }
}

/// Counters and pending additions.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
    gauges: Option<Gauges>,
}

impl Inner {
    fn subtract(&mut self, entries: impl IntoIterator<Item = Entry>, gauges: Option<&Gauges>, out: &mut Released) {
        for (id, tokens, _) in entries {
            if let Some((r, t)) = self.per_endpoint.get_mut(&id) {
                out.push((id.clone(), 1, tokens));
                *r = r.saturating_sub(1);
                *t = t.saturating_sub(tokens);
                if *r == 0 && *t == 0 {
                    self.per_endpoint.remove(&id);
                }
                if let Some(g) = gauges {
                    g.publish(&id, self.per_endpoint.get(&id).copied());
                }
            }
        }
    }
}

impl Inner {
    /// Subtracts tokens only (the requests stay in flight).
    fn subtract_tokens(&mut self, entries: Vec<(EndpointId, u64)>, gauges: Option<&Gauges>, out: &mut Released) {
        for (id, tokens) in entries {
            if let Some((_, t)) = self.per_endpoint.get_mut(&id) {
                out.push((id.clone(), 0, tokens));
                *t = t.saturating_sub(tokens);
                if let Some(g) = gauges {
                    g.publish(&id, self.per_endpoint.get(&id).copied());
                }
            }
        }
    }
}

impl Ledger {
    /// A ledger that mirrors its counters into `gauges`.
    pub fn with_gauges(gauges: Gauges) -> Self {
        Self { inner: Mutex::default(), gauges: Some(gauges) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the counters inconsistent beyond one
        // request's entry, so keep serving with the data as is.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// (requests, tokens) in flight on an endpoint.
    pub fn load(&self, endpoint: &str) -> (u64, u64) {
        self.lock().per_endpoint.get(endpoint).copied().unwrap_or((0, 0))
    }

    /// Records a request's additions.
    pub fn add(&self, request_id: &str, entries: Vec<Entry>) {
        let mut inner = self.lock();
        for (id, tokens, _) in &entries {
            let slot = inner.per_endpoint.entry(id.clone()).or_insert((0, 0));
            slot.0 += 1;
            slot.1 += tokens;
            let load = *slot;
            if let Some(g) = &self.gauges {
                g.publish(id, Some(load));
            }
        }
        inner.pending.entry(request_id.to_string()).or_default().push_back(entries);
    }

    /// First response chunk of the oldest pending request with this id: releases its
    /// early-releasable entries (prefill, encode) completely and, when `decode_tokens`, the
    /// tokens (not the request) of the others. Later calls find nothing more to release.
    /// Returns what was taken off.
    pub fn release_first_chunk(&self, request_id: &str, decode_tokens: bool) -> Released {
        let mut inner = self.lock();
        let mut out = Released::new();
        let Some(entries) = inner.pending.get_mut(request_id).and_then(|q| q.front_mut()) else { return out };
        let (early, mut keep): (Vec<Entry>, Vec<Entry>) = std::mem::take(entries).into_iter().partition(|e| e.2);
        let mut tokens_only = Vec::new();
        if decode_tokens {
            for (id, tokens, _) in &mut keep {
                if *tokens > 0 {
                    tokens_only.push((id.clone(), std::mem::take(tokens)));
                }
            }
        }
        *entries = keep;
        inner.subtract(early, self.gauges.as_ref(), &mut out);
        inner.subtract_tokens(tokens_only, self.gauges.as_ref(), &mut out);
        out
    }

    /// Releases everything left of the oldest pending request with this id; returns what
    /// was taken off.
    pub fn release(&self, request_id: &str) -> Released {
        let mut inner = self.lock();
        let mut out = Released::new();
        let Some(queue) = inner.pending.get_mut(request_id) else { return out };
        let entries = queue.pop_front().unwrap_or_default();
        if queue.is_empty() {
            inner.pending.remove(request_id);
        }
        inner.subtract(entries, self.gauges.as_ref(), &mut out);
        out
    }

    /// (endpoint, requests, tokens) of every endpoint with something in flight.
    pub fn totals(&self) -> Vec<(EndpointId, u64, u64)> {
        self.lock().per_endpoint.iter().map(|(id, (r, t))| (id.clone(), *r, *t)).collect()
    }
}
