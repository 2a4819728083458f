//! One accepted connection under the listener's limits: [`ConnTracker`] follows its open
//! requests (streams), [`GuardedIo`] wraps the socket and fails its next read or write once
//! the connection outlived a limit: no first request within the handshake timeout (covers a
//! silent TCP connection, a stalled TLS handshake and an HTTP/2 preface with nothing after
//! it), or no open request for the idle timeout. hyper then closes the connection.
//!
//! Hand-written because neither hyper nor tonic offers a handshake deadline or an idle
//! timeout based on open streams for server connections (tonic's TLS accept has no timeout).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::limits::ListenerLimits;
use super::metrics::ListenerCounters;

/// Request accounting of one connection.
#[derive(Debug)]
pub struct ConnTracker {
    opened: Instant,
    started: AtomicBool,
    open_streams: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl ConnTracker {
    fn new(now: Instant) -> Self {
        Self {
            opened: now,
            started: AtomicBool::new(false),
            open_streams: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
        }
    }

    /// A request (stream) started; the connection is busy until the guard drops.
    pub fn stream_started(self: &Arc<Self>) -> StreamGuard {
        self.started.store(true, Ordering::Release);
        self.open_streams.fetch_add(1, Ordering::AcqRel);
        StreamGuard(self.clone())
    }

    /// Why the connection must close at `now`, if it must.
    fn expired(&self, now: Instant, limits: &ListenerLimits) -> Option<CloseReason> {
        if !self.started.load(Ordering::Acquire) {
            return (now >= self.opened + limits.handshake_timeout).then_some(CloseReason::HandshakeTimeout);
        }
        if self.open_streams.load(Ordering::Acquire) > 0 {
            return None;
        }
        let idle_since = *self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
        (now >= idle_since + limits.idle_timeout).then_some(CloseReason::IdleTimeout)
    }

    /// When to look again.
    fn next_check(&self, now: Instant, limits: &ListenerLimits) -> Instant {
        if !self.started.load(Ordering::Acquire) {
            return self.opened + limits.handshake_timeout;
        }
        if self.open_streams.load(Ordering::Acquire) > 0 {
            return now + limits.idle_timeout;
        }
        *self.idle_since.lock().unwrap_or_else(|p| p.into_inner()) + limits.idle_timeout
    }
}

/// Marks one open request; dropping it ends the request.
#[derive(Debug)]
pub struct StreamGuard(Arc<ConnTracker>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if self.0.open_streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
    }
}

/// Why a connection was closed by its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// No first request within the handshake timeout.
    HandshakeTimeout,
    /// No open request for the idle timeout.
    IdleTimeout,
}

impl CloseReason {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::HandshakeTimeout => "handshake_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
        }
    }
}

/// What a request sees of its connection (tonic request extensions; for TLS inside
/// `TlsConnectInfo`).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Peer address.
    pub remote: Option<SocketAddr>,
    /// The connection's request accounting.
    pub tracker: Arc<ConnTracker>,
}

/// An accepted TCP stream under its listener's limits; holds one connection slot.
#[derive(Debug)]
pub struct GuardedIo {
    inner: TcpStream,
    info: ConnInfo,
    limits: ListenerLimits,
    counters: ListenerCounters,
    timer: Pin<Box<Sleep>>,
    closed: Option<CloseReason>,
    _slot: OwnedSemaphorePermit,
}

impl GuardedIo {
    pub(super) fn new(
        inner: TcpStream,
        limits: ListenerLimits,
        counters: ListenerCounters,
        slot: OwnedSemaphorePermit,
    ) -> Self {
        let now = Instant::now();
        let tracker = Arc::new(ConnTracker::new(now));
        let info = ConnInfo { remote: inner.peer_addr().ok(), tracker };
        counters.open.inc();
        let timer = Box::pin(tokio::time::sleep_until(now + limits.handshake_timeout));
        Self { inner, info, limits, counters, timer, closed: None, _slot: slot }
    }

    /// The connection's info (request accounting).
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// `Err` once a limit expired (counted once); registers the timer otherwise.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(reason) = self.closed {
            return Err(io::Error::new(io::ErrorKind::TimedOut, reason.as_str()));
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if let Some(reason) = self.info.tracker.expired(now, &self.limits) {
                self.closed = Some(reason);
                self.counters.closed(reason);
                return Err(io::Error::new(io::ErrorKind::TimedOut, reason.as_str()));
            }
            let next = self.info.tracker.next_check(now, &self.limits).max(now + std::time::Duration::from_millis(1));
            self.timer.as_mut().reset(next);
        }
        Ok(())
    }
}

impl Drop for GuardedIo {
    fn drop(&mut self) {
        self.counters.open.dec();
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for GuardedIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}
