//! Session bindings of the `session_id` strategy: session id -> the endpoint that served it,
//! with the time it was last used. A binding unused for longer than the TTL no longer
//! counts and is dropped by the next sweep; sweeps run from the request path at most once
//! per sweep period, so the store needs no task of its own. A TTL of zero keeps bindings
//! forever.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::endpoints::model::EndpointId;

#[derive(Debug)]
struct Binding {
    endpoint: EndpointId,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    bindings: HashMap<String, Binding>,
    last_sweep: Option<Instant>,
}

/// The session table.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    sweep: Duration,
    inner: Mutex<Inner>,
}

impl Sessions {
    /// Bindings expire after `ttl` unused (zero = never); expired ones are removed at most
    /// every `sweep`.
    pub fn new(ttl: Duration, sweep: Duration) -> Self {
        Self { ttl, sweep, inner: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, b: &Binding, now: Instant) -> bool {
        self.ttl.is_zero() || now.saturating_duration_since(b.last_used) < self.ttl
    }

    /// The endpoint bound to `session`, unless the binding expired.
    pub fn endpoint(&self, session: &str, now: Instant) -> Option<EndpointId> {
        let inner = self.lock();
        inner.bindings.get(session).filter(|b| self.live(b, now)).map(|b| b.endpoint.clone())
    }

    /// Binds (or rebinds) `session` to `endpoint`, marks it used now, and sweeps when due.
    pub fn bind(&self, session: &str, endpoint: EndpointId, now: Instant) {
        let mut inner = self.lock();
        match inner.bindings.get_mut(session) {
            Some(b) => *b = Binding { endpoint, last_used: now },
            None => {
                inner.bindings.insert(session.to_string(), Binding { endpoint, last_used: now });
            }
        }
        let due = inner.last_sweep.is_none_or(|t| now.saturating_duration_since(t) >= self.sweep);
        if due && !self.ttl.is_zero() {
            inner.last_sweep = Some(now);
            inner.bindings.retain(|_, b| now.saturating_duration_since(b.last_used) < self.ttl);
        }
    }

    /// Bindings held (live or awaiting the next sweep).
    pub fn len(&self) -> usize {
        self.lock().bindings.len()
    }

    /// True when no binding is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_expire_after_the_ttl_and_sweeps_drop_them() {
        let s = Sessions::new(Duration::from_secs(300), Duration::from_secs(10));
        let t0 = Instant::now();
        s.bind("chat-1", "pod-a".into(), t0);
        assert_eq!(s.endpoint("chat-1", t0 + Duration::from_secs(299)).as_deref(), Some("pod-a"));
        assert_eq!(s.endpoint("chat-1", t0 + Duration::from_secs(300)), None, "idle for the TTL");
        s.bind("chat-2", "pod-b".into(), t0 + Duration::from_secs(5));
        assert_eq!(s.len(), 2, "no sweep within the sweep period");
        s.bind("chat-2", "pod-c".into(), t0 + Duration::from_secs(301));
        assert_eq!(s.len(), 1, "the sweep dropped chat-1");
        assert_eq!(s.endpoint("chat-2", t0 + Duration::from_secs(302)).as_deref(), Some("pod-c"), "rebound");
    }

    #[test]
    fn zero_ttl_keeps_bindings() {
        let s = Sessions::new(Duration::ZERO, Duration::from_secs(1));
        let t0 = Instant::now();
        s.bind("x", "pod".into(), t0);
        s.bind("y", "pod".into(), t0 + Duration::from_secs(86400));
        assert_eq!(s.endpoint("x", t0 + Duration::from_secs(86400)).as_deref(), Some("pod"));
        assert_eq!(s.len(), 2);
    }
}
