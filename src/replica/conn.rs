//! Connections to Redis and their health: [`connect`] with connect and response timeouts (a
//! frozen server fails a call instead of hanging it), [`Backoff`] between attempts (100 ms
//! doubling to 5 s), and [`Health`], which turns the publisher's and the reader's view into
//! the `connected` gauge, counts outages once per transition and logs only on change.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

use super::metrics::SyncMetrics;

/// Opens a multiplexed connection whose calls fail after `response_timeout`.
pub async fn connect(client: &redis::Client, response_timeout: Duration) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout));
    client.get_multiplexed_async_connection_with_config(&config).await
}

/// Exponential backoff between connection attempts.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: Duration::from_millis(100) }
    }
}

impl Backoff {
    /// Waits the current delay (doubling it, up to 5 s); `Err` when cancelled meanwhile.
    pub async fn wait(&mut self, cancel: &CancellationToken) -> Result<(), ()> {
        let delay = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(5));
        tokio::select! {
            _ = cancel.cancelled() => Err(()),
            _ = tokio::time::sleep(delay) => Ok(()),
        }
    }
}

/// Which task reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The publisher's connection.
    Publisher,
    /// The reader's connection.
    Reader,
}

/// Connection health of both tasks.
#[derive(Debug)]
pub struct Health {
    up: Mutex<(bool, bool)>,
    metrics: SyncMetrics,
}

impl Health {
    /// Both down until they connect (not an outage yet).
    pub fn new(metrics: SyncMetrics) -> Self {
        metrics.connected.set(0);
        Self { up: Mutex::new((false, false)), metrics }
    }

    /// Records that `role` works.
    pub fn set_up(&self, role: Role) {
        self.set(role, true, &"");
    }

    /// Records `role`'s state; `why` is logged when it goes down.
    pub fn set(&self, role: Role, up: bool, why: &dyn std::fmt::Display) {
        let mut state = self.up.lock().unwrap_or_else(|p| p.into_inner());
        let was = state.0 && state.1;
        let slot = match role {
            Role::Publisher => &mut state.0,
            Role::Reader => &mut state.1,
        };
        let changed = *slot != up;
        *slot = up;
        let is = state.0 && state.1;
        self.metrics.connected.set(i64::from(is));
        if was && !is {
            self.metrics.outages.inc();
        }
        if changed && up {
            tracing::info!(?role, "Replica sync: connected to Redis");
        } else if changed {
            tracing::warn!(?role, error = %why, "Replica sync: Redis unreachable, routing on local state");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outages_count_transitions_from_fully_connected() {
        let metrics = SyncMetrics::register(&prometheus::Registry::new()).unwrap();
        let health = Health::new(metrics.clone());
        health.set(Role::Reader, false, &"refused");
        assert_eq!(metrics.outages.get(), 0, "never connected: not an outage");
        health.set_up(Role::Reader);
        health.set_up(Role::Publisher);
        assert_eq!(metrics.connected.get(), 1);
        health.set(Role::Publisher, false, &"reset");
        health.set(Role::Reader, false, &"reset");
        assert_eq!((metrics.connected.get(), metrics.outages.get()), (0, 1));
    }
}
