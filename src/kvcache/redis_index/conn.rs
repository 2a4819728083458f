//! One shared multiplexed connection to the index's Redis, (re)opened on demand. Calls never
//! wait for a reconnect another call started: while one attempt runs, or until the backoff
//! after a failed one passes (100 ms doubling to 5 s), they fail fast with
//! [`ConnError::NotConnected`]. A call that fails on I/O drops the connection so the next
//! call reconnects. Every response is bounded by the connection's response timeout, so a
//! frozen server fails calls instead of hanging them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// Why no connection is available.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// Another call is connecting, or the last attempt failed recently.
    #[error("not connected to Redis (reconnecting)")]
    NotConnected,
    /// The attempt failed.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] redis::RedisError),
}

#[derive(Debug, Default)]
struct State {
    conn: Option<MultiplexedConnection>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// The connection and its reconnect state.
#[derive(Debug)]
pub struct Conn {
    client: redis::Client,
    response_timeout: Duration,
    state: Mutex<State>,
    /// Held (not awaited) by the one call that connects; others see it taken and fail fast.
    /// An async mutex because the guard lives across the connect `.await`.
    connecting: tokio::sync::Mutex<()>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Conn {
    /// Not connected yet.
    pub fn new(client: redis::Client, response_timeout: Duration) -> Self {
        Self { client, response_timeout, state: Mutex::new(State::default()), connecting: tokio::sync::Mutex::new(()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current connection, or one attempt to open it.
    pub async fn get(&self) -> Result<MultiplexedConnection, ConnError> {
        if let Some(c) = self.state().conn.clone() {
            return Ok(c);
        }
        let Ok(_guard) = self.connecting.try_lock() else { return Err(ConnError::NotConnected) };
        {
            let s = self.state();
            if let Some(c) = s.conn.clone() {
                return Ok(c);
            }
            if s.retry_at.is_some_and(|t| Instant::now() < t) {
                return Err(ConnError::NotConnected);
            }
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.response_timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(self.response_timeout));
        match self.client.get_multiplexed_async_connection_with_config(&config).await {
            Ok(c) => {
                let mut s = self.state();
                if s.retry_at.take().is_some() {
                    tracing::info!("Redis index: connected");
                }
                s.backoff = FIRST_BACKOFF;
                s.conn = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                let mut s = self.state();
                if s.retry_at.is_none() {
                    tracing::warn!(error = %e, "Redis index: cannot connect; routing without shared prefix scores");
                }
                s.backoff = if s.backoff.is_zero() { FIRST_BACKOFF } else { (s.backoff * 2).min(MAX_BACKOFF) };
                s.retry_at = Some(Instant::now() + s.backoff);
                Err(ConnError::Connect(e))
            }
        }
    }

    /// Reports a failed call: I/O, timeout and dropped-connection errors close the connection.
    pub fn failed(&self, e: &redis::RedisError) {
        if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
            let mut s = self.state();
            if s.conn.take().is_some() {
                tracing::warn!(error = %e, "Redis index: connection lost");
                s.retry_at = Some(Instant::now());
            }
        }
    }
}
