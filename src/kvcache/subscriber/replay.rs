//! Replay client for vLLM's ROUTER replay socket (reference §4).
//!
//! Connects a DEALER (a REQ socket would only see the first reply), sends
//! `["", start_seq (8 bytes BE)]` and reads replies until the end marker
//! (seq `0xFFFF…FF` or an empty payload): `["", topic, seq, payload]` from
//! vLLM 0.26+, `["", seq, payload]` before. Batches at or beyond `until`
//! (the live seq that revealed the gap) are not needed. Bounded by an
//! overall and a per-reply idle timeout, and by the same [`WireLimits`] as the
//! SUB sockets (the replay peer is no more trusted than the publisher).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, timeout};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::frames::seq_of;
use super::limits::WireLimits;

/// End-of-replay sequence number.
const END_SEQ: u64 = u64::MAX;

/// Replay failures.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Connecting, sending or receiving failed.
    #[error("replay socket {operation} failed")]
    Zmq {
        operation: &'static str,
        #[source]
        source: zeromq::ZmqError,
    },
    /// No reply (or no end marker) in time.
    #[error("replay timed out")]
    Timeout,
    /// A reply had an unexpected layout.
    #[error("malformed replay reply with {0} frames")]
    Malformed(usize),
}

/// Timeouts of one replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayTimeouts {
    /// Whole exchange, connect included.
    pub overall: Duration,
    /// Between two replies.
    pub idle: Duration,
}

impl Default for ReplayTimeouts {
    fn default() -> Self {
        ReplayTimeouts { overall: Duration::from_secs(20), idle: Duration::from_secs(2) }
    }
}

/// Fetches batches `from..until` (whatever the publisher still buffers), oldest first.
pub async fn fetch(
    endpoint: &str,
    from: u64,
    until: u64,
    t: ReplayTimeouts,
    limits: &WireLimits,
) -> Result<Vec<(u64, Bytes)>, ReplayError> {
    let deadline = Instant::now() + t.overall;
    let mut sock = DealerSocket::with_options(limits.socket_options());
    match timeout(t.overall, sock.connect(endpoint)).await {
        Err(_) => return Err(ReplayError::Timeout),
        Ok(r) => r.map_err(|source| ReplayError::Zmq { operation: "connect", source })?,
    }
    let mut req = ZmqMessage::from(Bytes::new());
    req.push_back(Bytes::copy_from_slice(&from.to_be_bytes()));
    sock.send(req).await.map_err(|source| ReplayError::Zmq { operation: "send", source })?;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).min(t.idle);
        let msg = match timeout(left, sock.recv()).await {
            Err(_) => return Err(ReplayError::Timeout),
            Ok(r) => r.map_err(|source| ReplayError::Zmq { operation: "recv", source })?,
        };
        let frames = msg.into_vec();
        let (seq_frame, payload) = match frames.as_slice() {
            [_, _topic, seq, payload] => (seq, payload),
            [_, seq, payload] => (seq, payload),
            other => return Err(ReplayError::Malformed(other.len())),
        };
        let seq = seq_of(seq_frame).map_err(|_| ReplayError::Malformed(frames.len()))?;
        if seq == END_SEQ || payload.is_empty() {
            return Ok(out);
        }
        if seq >= until {
            return Ok(out);
        }
        if seq >= from {
            out.push((seq, payload.clone()));
        }
    }
}
