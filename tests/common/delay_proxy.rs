//! A TCP proxy on loopback that delivers every chunk it forwards `delay` after reading it, in
//! order, in both directions: a slow network path to a real server (here, redis-server) where
//! the kernel has no `sch_netem` to add latency. Each direction of a connection is a reader
//! task stamping chunks and a writer task releasing them at their due time, so the delay adds
//! to every round trip without throttling throughput. Stops with the runtime or on drop.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running proxy; stops accepting on drop.
pub struct DelayProxy {
    /// The proxy's own address (connect here instead of to the upstream).
    pub addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// Forwards connections on a fresh loopback port to `upstream`, each chunk `delay` late.
    pub async fn start(upstream: SocketAddr, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                pipe(client_read, server_write, delay);
                pipe(server_read, client_write, delay);
            }
        });
        Self { addr, accept }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read; ends with either side.
fn pipe(
    mut from: impl AsyncReadExt + Unpin + Send + 'static,
    mut to: impl AsyncWriteExt + Unpin + Send + 'static,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 || tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            // The delay is the component's behaviour (a slow link), not a wait for an effect.
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    });
}
