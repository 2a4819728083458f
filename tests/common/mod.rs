//! Shared helpers for integration tests: fake vLLM `/metrics` servers on loopback, an epp
//! started on ephemeral loopback ports with a temporary endpoints file, and an ext_proc
//! client that replays Envoy's message sequences.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use epp::app::{App, Settings};
use epp::proto::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp::proto::ext_proc::processing_request::Request;
use epp::proto::ext_proc::processing_response::Response;
use epp::proto::ext_proc::{
    HttpBody, HttpHeaders, HttpTrailers, ProcessingRequest, ProcessingResponse, ProtocolConfiguration, body_mutation,
};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prost_types::value::Kind;
use tokio::net::TcpListener;
pub mod delay_proxy;
pub mod kube;
pub mod kv;
pub mod netns;
pub mod process;
pub mod redis_server;
pub mod replica;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

/// Upper bound for any single wait in a test.
pub const WAIT: Duration = Duration::from_secs(10);

/// A fake vLLM serving `/metrics` with adjustable values (on every path but `/v1/models`)
/// and `/v1/models` with an adjustable status and body (404 until set).
pub struct FakeVllm {
    pub addr: SocketAddr,
    text: Arc<Mutex<String>>,
    models: Arc<Mutex<(u16, String)>>,
}

/// vLLM 0.33-style exposition with the given load.
pub fn exposition(waiting: u64, running: u64, kv: f64) -> String {
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}.0\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {kv}\n"
    )
}

impl FakeVllm {
    /// Starts on `ip` (a 127.0.0.0/8 address) and an ephemeral port.
    pub async fn start(ip: [u8; 4], waiting: u64, running: u64, kv: f64) -> Self {
        let listener = TcpListener::bind(SocketAddr::from((ip, 0))).await.expect("bind fake vllm");
        let addr = listener.local_addr().expect("addr");
        let text = Arc::new(Mutex::new(exposition(waiting, running, kv)));
        let models = Arc::new(Mutex::new((404, String::new())));
        let (served, served_models) = (text.clone(), models.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (served, served_models) = (served.clone(), served_models.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (status, body) = if req.uri().path() == "/v1/models" {
                            served_models.lock().map(|m| m.clone()).unwrap_or_default()
                        } else {
                            (200, served.lock().map(|t| t.clone()).unwrap_or_default())
                        };
                        async move {
                            let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
                            *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Self { addr, text, models }
    }

    /// Serves `/v1/models` as an OpenAI list: the first id is the base model, the rest its
    /// LoRA adapters (with `parent`, as vLLM lists them).
    pub fn set_models(&self, ids: &[&str]) {
        let base = ids.first().copied().unwrap_or_default();
        let data: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let parent = if i == 0 { "null".to_string() } else { format!("\"{base}\"") };
                format!(r#"{{"id":"{id}","object":"model","owned_by":"vllm","parent":{parent}}}"#)
            })
            .collect();
        *self.models.lock().expect("lock") = (200, format!(r#"{{"object":"list","data":[{}]}}"#, data.join(",")));
    }

    /// Makes `/v1/models` answer `status` with an empty body.
    pub fn fail_models(&self, status: u16) {
        *self.models.lock().expect("lock") = (status, String::new());
    }

    /// Replaces the load figures served.
    pub fn set(&self, waiting: u64, running: u64, kv: f64) {
        *self.text.lock().expect("lock") = exposition(waiting, running, kv);
    }
}

/// `(name, address, labels)` of one endpoint.
pub type EndpointSpec<'a> = (&'a str, SocketAddr, &'a [(&'a str, &'a str)]);

/// YAML for an endpoints file.
pub fn endpoints_yaml(eps: &[EndpointSpec<'_>]) -> String {
    let mut s = String::from("endpoints:\n");
    for (name, addr, labels) in eps {
        s.push_str(&format!("  - name: {name}\n    address: \"{}\"\n    port: {}\n", addr.ip(), addr.port()));
        if !labels.is_empty() {
            s.push_str("    labels:\n");
            for (k, v) in labels.iter() {
                s.push_str(&format!("      {k}: {v}\n"));
            }
        }
    }
    s
}

/// A running epp with its temp dir.
pub struct TestEpp {
    pub app: App,
    pub dir: tempfile::TempDir,
    pub endpoints_file: PathBuf,
}

impl TestEpp {
    /// Starts epp on loopback with `endpoints` YAML and an optional config.
    pub async fn start(endpoints: &str, config: Option<&str>, tweak: impl FnOnce(&mut Settings)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let endpoints_file = dir.path().join("endpoints.yaml");
        std::fs::write(&endpoints_file, endpoints).expect("write endpoints");
        let mut settings = Settings::loopback();
        settings.endpoints_file = Some(endpoints_file.clone());
        settings.config_text = config.map(str::to_string);
        settings.endpoints_poll_interval = Duration::from_millis(20);
        settings.refresh_metrics_interval = Duration::from_millis(10);
        tweak(&mut settings);
        let app = App::start(settings).await.expect("epp starts");
        Self { app, dir, endpoints_file }
    }

    /// Waits (on the store's metric-update barrier) until `check` holds.
    pub async fn wait_scraped(&self, check: impl Fn(&epp::endpoints::store::EndpointSet) -> bool) {
        let mut updates = self.app.store.subscribe_metrics();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !check(&self.app.store.snapshot()) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let changed = tokio::time::timeout(left, updates.changed()).await;
            assert!(matches!(changed, Ok(Ok(()))), "metrics not scraped within {WAIT:?}");
        }
    }

    /// Waits (on the store's change barrier) until the endpoint list holds exactly `names`.
    pub async fn wait_endpoints(&self, names: &[&str]) {
        let mut changes = self.app.store.subscribe();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let set = self.app.store.snapshot();
            let current: Vec<String> = set.entries.iter().map(|e| e.endpoint.id.to_string()).collect();
            if current == names {
                return;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let changed = tokio::time::timeout(left, changes.changed()).await;
            assert!(matches!(changed, Ok(Ok(()))), "endpoints not reloaded within {WAIT:?}: {current:?}");
        }
    }

    /// Waits until every endpoint's metrics match `waiting` queue sizes by name.
    pub async fn wait_waiting(&self, expected: &[(&str, u64)]) {
        self.wait_scraped(|set| {
            expected.iter().all(|(name, w)| {
                set.get(name).is_some_and(|e| {
                    let m = e.metrics.load();
                    m.updated_at.is_some() && m.metrics.waiting_queue_size == *w
                })
            })
        })
        .await;
    }

    /// A plaintext client.
    pub async fn client(&self) -> ExternalProcessorClient<tonic::transport::Channel> {
        ExternalProcessorClient::connect(format!("http://{}", self.app.grpc_addr)).await.expect("connect")
    }
}

/// One ext_proc stream driven like Envoy.
pub struct Exchange {
    tx: mpsc::Sender<ProcessingRequest>,
    /// The server's replies (and the status the stream ends with).
    pub rx: tonic::Streaming<ProcessingResponse>,
}

impl Exchange {
    /// Opens a stream.
    pub async fn open(client: &mut ExternalProcessorClient<tonic::transport::Channel>) -> Self {
        let (tx, rx_in) = mpsc::channel(64);
        let rx = client.process(ReceiverStream::new(rx_in)).await.expect("process").into_inner();
        Self { tx, rx }
    }

    /// Sends one message.
    pub async fn send(&self, msg: ProcessingRequest) {
        self.tx.send(msg).await.expect("send");
    }

    /// Next reply (panics after [`WAIT`]).
    pub async fn next(&mut self) -> ProcessingResponse {
        tokio::time::timeout(WAIT, self.rx.next())
            .await
            .expect("reply in time")
            .expect("stream open")
            .expect("reply ok")
    }

    /// Next `n` replies.
    pub async fn take(&mut self, n: usize) -> Vec<ProcessingResponse> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.next().await);
        }
        v
    }

    /// Half-closes and returns whether the server ends the stream with no further reply.
    pub async fn close_and_expect_end(mut self) -> bool {
        drop(self.tx);
        matches!(tokio::time::timeout(WAIT, self.rx.next()).await, Ok(None))
    }
}

fn header_map(headers: &[(&str, &str)]) -> HeaderMap {
    HeaderMap {
        headers: headers
            .iter()
            .map(|(k, v)| HeaderValue { key: k.to_string(), value: String::new(), raw_value: v.as_bytes().to_vec() })
            .collect(),
    }
}

/// Body modes as Envoy numbers them.
pub const NONE: i32 = 0;
pub const STREAMED: i32 = 1;
pub const BUFFERED: i32 = 2;
pub const FULL_DUPLEX: i32 = 4;

/// `request_headers` with `protocol_config` (request mode, response mode) when given; `content-type`
/// is `application/json` unless `extra` sets one.
pub fn request_headers(path: &str, extra: &[(&str, &str)], eos: bool, modes: Option<(i32, i32)>) -> ProcessingRequest {
    let mut all = vec![(":method", "POST"), (":path", path)];
    if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        all.push(("content-type", "application/json"));
    }
    all.extend_from_slice(extra);
    ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(header_map(&all)),
            end_of_stream: eos,
            ..Default::default()
        })),
        protocol_config: modes.map(|(req, resp)| ProtocolConfiguration {
            request_body_mode: req,
            response_body_mode: resp,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Adds the subset hint metadata to a message.
pub fn with_subset_hint(mut msg: ProcessingRequest, hosts: &[&str]) -> ProcessingRequest {
    let list = prost_types::ListValue {
        values: hosts.iter().map(|h| prost_types::Value { kind: Some(Kind::StringValue(h.to_string())) }).collect(),
    };
    let inner = prost_types::Struct {
        fields: [(
            "x-gateway-destination-endpoint-subset".to_string(),
            prost_types::Value { kind: Some(Kind::ListValue(list)) },
        )]
        .into(),
    };
    msg.metadata_context =
        Some(Metadata { filter_metadata: [("envoy.lb.subset_hint".to_string(), inner)].into(), ..Default::default() });
    msg
}

/// `request_body`.
pub fn request_body(body: &[u8], eos: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody { body: body.to_vec(), end_of_stream: eos })),
        ..Default::default()
    }
}

/// `request_trailers`.
pub fn request_trailers() -> ProcessingRequest {
    ProcessingRequest { request: Some(Request::RequestTrailers(HttpTrailers::default())), ..Default::default() }
}

/// `response_headers`.
pub fn response_headers(status: &str, content_type: &str) -> ProcessingRequest {
    let map = header_map(&[(":status", status), ("content-type", content_type)]);
    ProcessingRequest {
        request: Some(Request::ResponseHeaders(HttpHeaders {
            headers: Some(map),
            end_of_stream: false,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `response_body`.
pub fn response_body(body: &[u8], eos: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::ResponseBody(HttpBody { body: body.to_vec(), end_of_stream: eos })),
        ..Default::default()
    }
}

/// Header mutation and flags of a headers or body reply.
pub fn common(r: &ProcessingResponse) -> Option<&epp::proto::ext_proc::CommonResponse> {
    match r.response.as_ref()? {
        Response::RequestHeaders(h) | Response::ResponseHeaders(h) => h.response.as_ref(),
        Response::RequestBody(b) | Response::ResponseBody(b) => b.response.as_ref(),
        _ => None,
    }
}

/// A header set by a reply.
pub fn set_header(r: &ProcessingResponse, name: &str) -> Option<String> {
    common(r)?.header_mutation.as_ref()?.set_headers.iter().find_map(|h| {
        let h = h.header.as_ref()?;
        assert!(h.value.is_empty(), "header {} set with `value`", h.key);
        (h.key.eq_ignore_ascii_case(name)).then(|| String::from_utf8_lossy(&h.raw_value).into_owned())
    })
}

/// Headers removed by a reply.
pub fn removed_headers(r: &ProcessingResponse) -> Vec<String> {
    common(r).and_then(|c| c.header_mutation.as_ref()).map(|m| m.remove_headers.clone()).unwrap_or_default()
}

/// The destination in `envoy.lb` metadata.
pub fn metadata_destination(r: &ProcessingResponse) -> Option<String> {
    let lb = r.dynamic_metadata.as_ref()?.fields.get("envoy.lb")?;
    let Some(Kind::StructValue(s)) = &lb.kind else { return None };
    match &s.fields.get("x-gateway-destination-endpoint")?.kind {
        Some(Kind::StringValue(v)) => Some(v.clone()),
        _ => None,
    }
}

/// (chunk, end_of_stream) of a streamed body reply.
pub fn streamed(r: &ProcessingResponse) -> Option<(Vec<u8>, bool)> {
    match common(r)?.body_mutation.as_ref()?.mutation.as_ref()? {
        body_mutation::Mutation::StreamedResponse(s) => Some((s.body.clone(), s.end_of_stream)),
        _ => None,
    }
}

/// Buffered body replacement of a body reply.
pub fn replaced_body(r: &ProcessingResponse) -> Option<Vec<u8>> {
    match common(r)?.body_mutation.as_ref()?.mutation.as_ref()? {
        body_mutation::Mutation::Body(b) => Some(b.clone()),
        _ => None,
    }
}

/// (status, body) of an immediate response.
pub fn immediate(r: &ProcessingResponse) -> Option<(i32, String)> {
    match r.response.as_ref()? {
        Response::ImmediateResponse(i) => {
            Some((i.status.as_ref().map_or(0, |s| s.code), String::from_utf8_lossy(&i.body).into_owned()))
        }
        _ => None,
    }
}

/// True for a request-headers reply.
pub fn is_request_headers(r: &ProcessingResponse) -> bool {
    matches!(r.response, Some(Response::RequestHeaders(_)))
}

/// True for a request-trailers reply.
pub fn is_request_trailers(r: &ProcessingResponse) -> bool {
    matches!(r.response, Some(Response::RequestTrailers(_)))
}

/// Fetches the admin `/metrics` text.
pub async fn scrape(addr: SocketAddr) -> String {
    http_get(addr, "/metrics").await.1
}

/// GETs `path` from the admin server: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) = http_get_bytes(addr, path, None).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `path` from the admin server with an optional bearer token: (status, body bytes).
pub async fn http_get_bytes(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, Bytes) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect admin");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, http_body_util::Empty<Bytes>>(TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header("host", "localhost");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req.body(http_body_util::Empty::new()).expect("request");
    let resp = sender.send_request(req).await.expect("admin response");
    let status = resp.status().as_u16();
    use http_body_util::BodyExt;
    (status, resp.into_body().collect().await.expect("body").to_bytes())
}

/// A chat body.
pub fn chat(model: &str, text: &str, stream: bool) -> Vec<u8> {
    serde_json::to_vec(
        &serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}),
    )
    .expect("json")
}

/// The sum of every sample whose line starts with `prefix` (a name, or a name and the start
/// of its labels) in `/metrics` text; 0 when none.
pub fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Keeps only endpoints labelled `pool: <pool>`; with `session` the session-affinity scorer
/// adds its `x-session-token` response header.
pub fn pool_config(pool: &str, session: bool) -> String {
    let session_plugin = if session { "\n  - type: session-affinity-scorer" } else { "" };
    let session_ref = if session { "\n      - pluginRef: session-affinity-scorer" } else { "" };
    format!(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: by-label
    parameters: {{label: pool, validValues: [{pool}]}}
  - type: queue-scorer{session_plugin}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: by-label
      - pluginRef: queue-scorer{session_ref}
"
    )
}
