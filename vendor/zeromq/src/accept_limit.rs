//! EPP PATCH: a cap on the connections a bound socket holds at once.
//!
//! Upstream accepts and keeps every incoming connection, so any number of peers (each
//! holding a file descriptor, a task and up to its decoder limits in buffers) can pile up on a
//! bound socket. With an [`AcceptLimit`] in the socket's options, an accepted connection takes
//! a slot before anything is sent or read; over the cap it is closed at once (nothing is
//! written) and the limit's rejection callback runs. The slot is released when the
//! connection's transport is dropped: both halves, whether the handshake failed, the peer left
//! or the socket was dropped.

use crate::codec::{FrameableRead, FrameableWrite, FramedIo};
use crate::endpoint::Endpoint;

use futures::{AsyncRead, AsyncWrite};

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Callback run for each connection closed because the cap was reached (gets the peer's
/// address).
pub type RejectCallback = Box<dyn Fn(&Endpoint) + Send + Sync>;

/// The most connections a bound socket holds at once, over all its binds.
pub struct AcceptLimit {
    max: usize,
    open: AtomicUsize,
    on_reject: RejectCallback,
}

impl fmt::Debug for AcceptLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcceptLimit")
            .field("max", &self.max)
            .field("open", &self.open())
            .finish()
    }
}

impl AcceptLimit {
    /// A cap of `max` connections (zero is read as one); `on_reject` runs for each connection
    /// closed over the cap.
    pub fn new(max: usize, on_reject: impl Fn(&Endpoint) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            open: AtomicUsize::new(0),
            on_reject: Box::new(on_reject),
        })
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Accepted connections holding a slot now (handshaking or connected).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Gives `io` a slot, or closes it (drops it) and runs the rejection callback when the
    /// cap is reached.
    pub(crate) fn admit(self: &Arc<Self>, io: FramedIo, peer: &Endpoint) -> Option<FramedIo> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            drop(io);
            (self.on_reject)(peer);
            return None;
        }
        let slot = Arc::new(Slot(self.clone()));
        // Nothing was read or written yet: the codecs are fresh and the buffers empty, so the
        // transport can be rewrapped without losing state.
        let (read, write) = io.into_parts();
        let read: Box<dyn FrameableRead> = Box::new(Counted {
            inner: read.into_inner(),
            _slot: slot.clone(),
        });
        let write: Box<dyn FrameableWrite> = Box::new(Counted {
            inner: write.into_inner(),
            _slot: slot,
        });
        Some(FramedIo::new(read, write))
    }
}

/// One taken slot; released when the last half of its connection is dropped.
struct Slot(Arc<AcceptLimit>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A transport half that holds its connection's slot.
struct Counted<T> {
    inner: T,
    _slot: Arc<Slot>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}
