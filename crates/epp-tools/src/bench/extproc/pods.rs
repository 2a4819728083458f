//! Simulated model-server pods for the in-process epp: each is a tiny HTTP `/metrics` server
//! on 127.0.0.1 serving a fixed vLLM-style exposition (varied load per pod), optionally with a
//! ZeroMQ PUB socket for KV events, and the endpoints file that lists them.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use zeromq::{PubSocket, Socket};

/// The simulated pods.
pub struct Pods {
    /// `/metrics` address of each pod; also its serving address (the destination).
    pub addrs: Vec<SocketAddr>,
    /// KV-event PUB sockets, one per pod (empty without KV events).
    pub publishers: Vec<PubSocket>,
    kv_endpoints: Vec<String>,
}

impl Pods {
    /// Starts `n` pods on the current runtime; with `kv`, each also binds a PUB socket.
    pub async fn start(n: usize, kv: bool, cancel: &CancellationToken) -> anyhow::Result<Self> {
        let mut pods = Self { addrs: Vec::new(), publishers: Vec::new(), kv_endpoints: Vec::new() };
        for i in 0..n {
            let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
            pods.addrs.push(listener.local_addr()?);
            tokio::spawn(serve(listener, Bytes::from(exposition(i)), cancel.clone()));
            if kv {
                let mut publisher = PubSocket::new();
                let endpoint = publisher.bind("tcp://127.0.0.1:0").await?;
                pods.kv_endpoints.push(endpoint.to_string());
                pods.publishers.push(publisher);
            }
        }
        Ok(pods)
    }

    /// The endpoints file listing every pod.
    pub fn endpoints_yaml(&self) -> String {
        let mut s = String::from("endpoints:\n");
        for (i, addr) in self.addrs.iter().enumerate() {
            s.push_str(&format!("  - name: pod-{i}\n    address: \"{}\"\n    port: {}\n", addr.ip(), addr.port()));
            if let Some(kv) = self.kv_endpoints.get(i) {
                s.push_str(&format!("    kvEventsEndpoint: \"{kv}\"\n"));
            }
        }
        s
    }
}

/// vLLM exposition with pod-dependent queue depth and KV use.
fn exposition(i: usize) -> String {
    let (waiting, running, kv) = (i % 4, 2 + i % 5, 0.1 + 0.1 * (i % 7) as f64);
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {running}\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} {waiting}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} {kv:.2}\n"
    )
}

async fn serve(listener: TcpListener, text: Bytes, cancel: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted { Ok((s, _)) => s, Err(_) => continue },
        };
        let text = text.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |_req| {
                let body = text.clone();
                async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(body))) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            tokio::select! { _ = cancel.cancelled() => {}, _ = conn => {} }
        });
    }
}
