//! The network face of one simulated pod in wire mode: an HTTP server answering `/metrics`
//! (any path) with vLLM-style Prometheus text that the simulator replaces at each load
//! publication, and a ZeroMQ PUB socket sending KV-event batches as vLLM does (frames:
//! topic `kv@<ip:port>@<model>`, sequence number u64 big-endian, msgpack payload).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

use epp::kvcache::events::EventBatch;

/// One pod's listeners.
pub struct PodServer {
    /// Address of the `/metrics` server (also the pod's endpoint address).
    pub addr: SocketAddr,
    /// `tcp://...` endpoint of the PUB socket.
    pub kv_endpoint: String,
    text: Arc<Mutex<String>>,
    publisher: PubSocket,
    topic: Bytes,
}

impl std::fmt::Debug for PodServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodServer").field("addr", &self.addr).field("kv_endpoint", &self.kv_endpoint).finish()
    }
}

impl PodServer {
    /// Binds both listeners on 127.0.0.1 ephemeral ports; the HTTP server runs until
    /// `cancel`.
    pub async fn start(model: &str, cancel: CancellationToken) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let text = Arc::new(Mutex::new(String::new()));
        tokio::spawn(serve(listener, text.clone(), cancel));
        let mut publisher = PubSocket::new();
        let kv_endpoint = publisher
            .bind("tcp://127.0.0.1:0")
            .await
            .map_err(|e| std::io::Error::other(format!("bind PUB: {e}")))?
            .to_string();
        let topic = Bytes::from(format!("kv@{addr}@{model}"));
        Ok(Self { addr, kv_endpoint, text, publisher, topic })
    }

    /// Replaces the exposition text served from now on.
    pub fn set_metrics(&self, text: String) {
        if let Ok(mut t) = self.text.lock() {
            *t = text;
        }
    }

    /// Publishes one batch with sequence number `seq`. A PUB socket drops messages when
    /// nobody is subscribed or a subscriber is slow, as vLLM's does; errors are returned.
    pub async fn publish(&mut self, seq: u64, batch: &EventBatch) -> Result<(), zeromq::ZmqError> {
        let payload = Bytes::from(epp::kvcache::encode_batch(batch));
        let frames = vec![self.topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload];
        let message = ZmqMessage::try_from(frames).map_err(|_| zeromq::ZmqError::NoMessage)?;
        self.publisher.send(message).await
    }
}

async fn serve(listener: TcpListener, text: Arc<Mutex<String>>, cancel: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let text = text.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |_req| {
                let body = text.lock().map(|t| t.clone()).unwrap_or_default();
                async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body)))) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}
