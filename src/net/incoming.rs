//! The guarded accept loop: accepts on a listener, closes connections beyond the cap at once
//! (counted), sets Nagle off and TCP keep-alive, and hands the rest on as [`GuardedIo`].

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::conn::GuardedIo;
use super::limits::ListenerLimits;
use super::metrics::ListenerCounters;

/// Accepted connections, ready for `serve_with_incoming`.
pub type Incoming = ReceiverStream<std::io::Result<GuardedIo>>;

/// Starts accepting on `listener` until `cancel`; connections come out of the returned
/// stream. `tcp_keepalive`: probe time, `None` = off.
pub fn guarded(
    listener: TcpListener,
    limits: ListenerLimits,
    tcp_keepalive: Option<Duration>,
    counters: ListenerCounters,
    cancel: CancellationToken,
) -> Incoming {
    let (tx, rx) = mpsc::channel(16);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            let accepted = tokio::select! {
                () = cancel.cancelled() => return,
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    debug!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                counters.rejected.inc();
                if !warned {
                    warn!(max = limits.max_connections, "Connection limit reached; closing new connections");
                    warned = true;
                }
                drop(stream);
                continue;
            };
            warned = false;
            counters.accepted.inc();
            let _ = stream.set_nodelay(true);
            if let Some(time) = tcp_keepalive {
                let _ =
                    socket2::SockRef::from(&stream).set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(time));
            }
            if tx.send(Ok(GuardedIo::new(stream, limits, counters.clone(), slot))).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}
