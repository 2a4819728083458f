//! A mock Kubernetes API server on 127.0.0.1 (plain HTTP/1.1): LIST and streamed WATCH of any
//! collection path with `labelSelector` (`k=v,...`) and `fieldSelector` (`metadata.name=x`),
//! resource versions, watch replay from a version, 410 Gone for compacted versions, API
//! discovery documents, and test controls to expire or drop watches and inject raw lines.
//! Every request bumps a generation so tests can wait for "the client re-listed/re-watched".

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::WAIT;

type Body = BoxBody<Bytes, Infallible>;
type FrameTx = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

struct Watcher {
    label: Option<String>,
    field: Option<String>,
    tx: FrameTx,
}

#[derive(Default)]
struct Collection {
    objects: BTreeMap<String, Value>,
    history: Vec<(u64, &'static str, Value)>,
    compacted: u64,
    watchers: Vec<Watcher>,
    lists: u64,
    watches: u64,
}

#[derive(Default)]
struct Inner {
    /// Token -> user name for TokenReviews.
    users: HashMap<String, String>,
    /// Users a SubjectAccessReview allows to `get /metrics`.
    metrics_readers: Vec<String>,
    /// (TokenReviews, SubjectAccessReviews) answered.
    reviews: (u64, u64),
    rv: u64,
    collections: HashMap<String, Collection>,
    discovery: HashMap<String, Value>,
}

/// The mock server.
#[derive(Clone)]
pub struct MockKube {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    generation: watch::Sender<u64>,
    /// TLS mode: the CA and the accepted credentials.
    pub tls: Option<Arc<MockTls>>,
}

/// Certificates of the TLS mode (PEM) and the bearer tokens it accepts. A request is
/// authenticated by a client certificate the CA signed or by one of the tokens; otherwise
/// it gets 401.
pub struct MockTls {
    /// CA of the server and client certificates.
    pub ca_pem: String,
    /// The server certificate (for 127.0.0.1 and localhost) and its key.
    pub server_cert_pem: String,
    pub server_key_pem: String,
    /// A client certificate signed by the CA, and its key.
    pub client_cert_pem: String,
    pub client_key_pem: String,
    /// Accepted bearer tokens.
    pub tokens: Vec<String>,
}

impl MockKube {
    /// Starts on 127.0.0.1 and an ephemeral port (plain HTTP, no authentication).
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// Starts an https server whose certificate (for 127.0.0.1) and client certificate a
    /// fresh CA signed; `tokens` are accepted as bearer tokens.
    pub async fn start_tls(tokens: &[&str]) -> Self {
        Self::start_with(Some(tokens.iter().map(|t| t.to_string()).collect())).await
    }

    async fn start_with(tokens: Option<Vec<String>>) -> Self {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("bind mock kube");
        let addr = listener.local_addr().expect("addr");
        let (tls, acceptor) = match tokens {
            Some(tokens) => {
                let (tls, acceptor) = tls_material(tokens);
                (Some(Arc::new(tls)), Some(acceptor))
            }
            None => (None, None),
        };
        let mock = Self { addr, inner: Arc::default(), generation: watch::channel(0).0, tls };
        let server = mock.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let server = server.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Some(acceptor) = acceptor else {
                        server.serve(TokioIo::new(stream), true).await;
                        return;
                    };
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let client_cert = tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                    server.serve(TokioIo::new(tls), client_cert).await;
                });
            }
        });
        mock
    }

    async fn serve<IO>(&self, io: TokioIo<IO>, client_cert: bool)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let server = self.clone();
        let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let server = server.clone();
            async move {
                if !server.authenticated(&req, client_cert) {
                    return Ok::<_, Infallible>(status_response(401, "Unauthorized", "Unauthorized"));
                }
                Ok::<_, Infallible>(server.handle(req).await)
            }
        });
        let _ = http1::Builder::new().serve_connection(io, svc).await;
    }

    fn authenticated(&self, req: &hyper::Request<hyper::body::Incoming>, client_cert: bool) -> bool {
        let Some(tls) = &self.tls else { return true };
        let token =
            req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        client_cert || token.is_some_and(|t| tls.tokens.iter().any(|ok| ok == t))
    }

    /// A kubeconfig for the TLS mode with `user` as the user entry (YAML flow mapping, e.g.
    /// `{token: abc}`), written to `dir`.
    pub fn tls_kubeconfig(&self, dir: &std::path::Path, user: &str) -> std::path::PathBuf {
        use base64::Engine;
        let tls = self.tls.as_ref().expect("a TLS mock");
        let ca = base64::engine::general_purpose::STANDARD.encode(&tls.ca_pem);
        let path = dir.join("kubeconfig-tls");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: mock\ncontexts:\n- name: mock\n  context: {{cluster: mock, user: me}}\nclusters:\n- name: mock\n  cluster: {{server: 'https://{}', certificate-authority-data: {ca}}}\nusers:\n- name: me\n  user: {user}\n",
            self.addr
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// A kubeconfig pointing at this server (no auth), written to `dir`.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: mock\ncontexts:\n- name: mock\n  context: {{cluster: mock, user: me}}\nclusters:\n- name: mock\n  cluster: {{server: 'http://{}'}}\nusers:\n- name: me\n  user: {{}}\n",
            self.addr
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// Serves an APIResourceList at `path` (e.g. `/api/v1`).
    /// Each resource needs `name`, `kind` and `namespaced`; the other required fields are
    /// filled in.
    pub fn set_discovery(&self, path: &str, mut resources: Value) {
        for r in resources.as_array_mut().expect("resources array") {
            let singular = r["kind"].as_str().unwrap_or_default().to_ascii_lowercase();
            r["singularName"] = json!(singular);
            r["verbs"] = json!(["get", "list", "watch"]);
        }
        let group_version = path.trim_start_matches("/apis/").trim_start_matches("/api/");
        let doc = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources});
        self.inner.lock().unwrap().discovery.insert(path.to_string(), doc);
    }

    /// Creates or replaces an object; returns its new resourceVersion.
    pub fn apply(&self, collection: &str, mut object: Value) -> u64 {
        let mut inner = self.inner.lock().unwrap();
        inner.rv += 1;
        let rv = inner.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let name = object["metadata"]["name"].as_str().expect("object name").to_string();
        let c = inner.collections.entry(collection.to_string()).or_default();
        let kind = if c.objects.insert(name, object.clone()).is_some() { "MODIFIED" } else { "ADDED" };
        c.history.push((rv, kind, object.clone()));
        c.broadcast(kind, &object);
        rv
    }

    /// Deletes an object (no-op when absent).
    pub fn delete(&self, collection: &str, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner.rv += 1;
        let rv = inner.rv;
        let c = inner.collections.entry(collection.to_string()).or_default();
        if let Some(mut object) = c.objects.remove(name) {
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            c.history.push((rv, "DELETED", object.clone()));
            c.broadcast("DELETED", &object);
        }
    }

    /// Compacts history: open watches get an ERROR 410 event and end; resuming from a version
    /// older than the current one answers 410 too, so the client must relist.
    pub fn expire(&self, collection: &str) {
        let mut inner = self.inner.lock().unwrap();
        let rv = inner.rv;
        let c = inner.collections.entry(collection.to_string()).or_default();
        c.compacted = rv;
        c.history.clear();
        for w in c.watchers.drain(..) {
            let _ = w.tx.send(Ok(Frame::data(gone_line())));
        }
    }

    /// Ends every open watch of `collection` (the connection closes, as on a network drop).
    pub fn drop_watches(&self, collection: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner.collections.entry(collection.to_string()).or_default().watchers.clear();
    }

    /// Sends a raw line to every open watch of `collection`.
    pub fn inject(&self, collection: &str, line: &str) {
        let mut inner = self.inner.lock().unwrap();
        let c = inner.collections.entry(collection.to_string()).or_default();
        for w in &c.watchers {
            let _ = w.tx.send(Ok(Frame::data(Bytes::from(format!("{line}\n")))));
        }
    }

    /// (LISTs, WATCHes) served for `collection` so far.
    pub fn calls(&self, collection: &str) -> (u64, u64) {
        let inner = self.inner.lock().unwrap();
        inner.collections.get(collection).map_or((0, 0), |c| (c.lists, c.watches))
    }

    /// Open watches of `collection`.
    pub fn open_watches(&self, collection: &str) -> usize {
        let mut inner = self.inner.lock().unwrap();
        let c = inner.collections.entry(collection.to_string()).or_default();
        c.watchers.retain(|w| !w.tx.is_closed());
        c.watchers.len()
    }

    /// Waits (on the request barrier) until `check` holds.
    pub async fn wait_until(&self, what: &str, check: impl Fn(&Self) -> bool) {
        let mut changes = self.generation.subscribe();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !check(self) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let changed = tokio::time::timeout(left, changes.changed()).await;
            assert!(matches!(changed, Ok(Ok(()))), "mock kube: {what} not within {WAIT:?}");
        }
    }

    async fn handle(&self, req: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Body> {
        let path = req.uri().path().to_string();
        let query = parse_query(req.uri().query().unwrap_or_default());
        let method = req.method().clone();
        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let response = match method {
            hyper::Method::GET => match object_path(&path) {
                Some((collection, name)) => self.get_object(collection, name),
                None => self.route(&path, &query),
            },
            hyper::Method::POST if path == "/apis/authentication.k8s.io/v1/tokenreviews" => self.token_review(&body),
            hyper::Method::POST if path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                self.access_review(&body)
            }
            hyper::Method::POST => self.create_object(&path, &body),
            hyper::Method::PUT => match object_path(&path) {
                Some((collection, name)) => self.replace_object(collection, name, &body),
                None => status_response(405, "MethodNotAllowed", "PUT needs an object path"),
            },
            _ => status_response(405, "MethodNotAllowed", "method not supported by the mock"),
        };
        self.generation.send_modify(|g| *g += 1);
        response
    }

    /// TokenReviews authenticate `token` as `user`.
    pub fn add_user(&self, token: &str, user: &str) {
        self.inner.lock().unwrap().users.insert(token.into(), user.into());
    }

    /// SubjectAccessReviews allow `user` to `get` the non-resource URL `/metrics`.
    pub fn allow_metrics(&self, user: &str) {
        self.inner.lock().unwrap().metrics_readers.push(user.into());
    }

    /// (TokenReviews, SubjectAccessReviews) answered so far.
    pub fn reviews(&self) -> (u64, u64) {
        self.inner.lock().unwrap().reviews
    }

    fn token_review(&self, body: &[u8]) -> hyper::Response<Body> {
        let review: Value = serde_json::from_slice(body).unwrap_or_default();
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let mut inner = self.inner.lock().unwrap();
        inner.reviews.0 += 1;
        let status = match inner.users.get(token) {
            Some(user) => {
                json!({"authenticated": true, "user": {"username": user, "groups": ["system:authenticated"]}})
            }
            None => json!({"authenticated": false, "error": "invalid token"}),
        };
        let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
            "spec": review["spec"], "status": status});
        json_response(201, &answer)
    }

    fn access_review(&self, body: &[u8]) -> hyper::Response<Body> {
        let review: Value = serde_json::from_slice(body).unwrap_or_default();
        let spec = &review["spec"];
        let mut inner = self.inner.lock().unwrap();
        inner.reviews.1 += 1;
        let user = spec["user"].as_str().unwrap_or_default();
        let asks_metrics = spec["nonResourceAttributes"] == json!({"path": "/metrics", "verb": "get"});
        let allowed = asks_metrics && inner.metrics_readers.iter().any(|u| u == user);
        let answer = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
            "spec": spec, "status": {"allowed": allowed}});
        json_response(201, &answer)
    }

    /// An object of `collection` (e.g. a Lease), if present.
    pub fn object(&self, collection: &str, name: &str) -> Option<Value> {
        self.inner.lock().unwrap().collections.get(collection).and_then(|c| c.objects.get(name).cloned())
    }

    fn get_object(&self, collection: &str, name: &str) -> hyper::Response<Body> {
        match self.object(collection, name) {
            Some(o) => json_response(200, &o),
            None => status_response(404, "NotFound", &format!("{name} not found")),
        }
    }

    /// POST: create (409 AlreadyExists when the name is taken).
    fn create_object(&self, collection: &str, body: &[u8]) -> hyper::Response<Body> {
        let Ok(object) = serde_json::from_slice::<Value>(body) else {
            return status_response(400, "BadRequest", "body is not JSON");
        };
        let Some(name) = object["metadata"]["name"].as_str() else {
            return status_response(422, "Invalid", "metadata.name is required");
        };
        if self.object(collection, name).is_some() {
            return status_response(409, "AlreadyExists", &format!("{name} already exists"));
        }
        self.apply(collection, object.clone());
        json_response(201, &self.object(collection, name).unwrap_or(object))
    }

    /// PUT: replace; the body's resourceVersion must be the stored one (409 Conflict).
    fn replace_object(&self, collection: &str, name: &str, body: &[u8]) -> hyper::Response<Body> {
        let Ok(object) = serde_json::from_slice::<Value>(body) else {
            return status_response(400, "BadRequest", "body is not JSON");
        };
        let Some(stored) = self.object(collection, name) else {
            return status_response(404, "NotFound", &format!("{name} not found"));
        };
        let sent = object["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        if sent != stored["metadata"]["resourceVersion"].as_str().unwrap_or_default() {
            return status_response(
                409,
                "Conflict",
                "the object has been modified; apply your changes to the latest version",
            );
        }
        self.apply(collection, object);
        json_response(200, &self.object(collection, name).unwrap_or_default())
    }

    fn route(&self, path: &str, query: &HashMap<String, String>) -> hyper::Response<Body> {
        let mut inner = self.inner.lock().unwrap();
        if let Some(doc) = inner.discovery.get(path) {
            return json_response(200, doc);
        }
        let label = query.get("labelSelector").cloned().filter(|s| !s.is_empty());
        let field = query.get("fieldSelector").cloned().filter(|s| !s.is_empty());
        let rv = inner.rv;
        let c = inner.collections.entry(path.to_string()).or_default();
        if query.get("watch").map(String::as_str) != Some("true") {
            c.lists += 1;
            let items: Vec<Value> =
                c.objects.values().filter(|o| matches(o, label.as_deref(), field.as_deref())).cloned().collect();
            let list = json!({"kind": "List", "metadata": {"resourceVersion": rv.to_string()}, "items": items});
            return json_response(200, &list);
        }
        c.watches += 1;
        let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        if from < c.compacted {
            let _ = tx.send(Ok(Frame::data(gone_line())));
        } else {
            for (version, kind, object) in &c.history {
                if *version > from && matches(object, label.as_deref(), field.as_deref()) {
                    let _ = tx.send(Ok(Frame::data(event_line(kind, object))));
                }
            }
            c.watchers.push(Watcher { label, field, tx });
        }
        let body = StreamBody::new(UnboundedReceiverStream::new(rx)).boxed();
        hyper::Response::builder().status(200).header("content-type", "application/json").body(body).unwrap()
    }
}

impl Collection {
    fn broadcast(&mut self, kind: &str, object: &Value) {
        self.watchers.retain(|w| {
            !matches(object, w.label.as_deref(), w.field.as_deref())
                || w.tx.send(Ok(Frame::data(event_line(kind, object)))).is_ok()
        });
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, and the acceptor.
fn tls_material(tokens: Vec<String>) -> (MockTls, tokio_rustls::TlsAcceptor) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca).unwrap();
        (cert, key)
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["tester".into()]);
    let provider = Arc::new(crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(server_cert.der().to_vec()), ca.der().clone()], key)
        .unwrap();
    let tls = MockTls {
        ca_pem: ca.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
        tokens,
    };
    (tls, tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    Bytes::from(format!("{}\n", json!({"type": kind, "object": object})))
}

fn gone_line() -> Bytes {
    let status = json!({"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired",
        "message": "too old resource version"});
    Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": status})))
}

/// `(collection, name)` when `path` names one namespaced object
/// (`/api/v1/namespaces/ns/<plural>/<name>` or `/apis/<g>/<v>/namespaces/ns/<plural>/<name>`).
fn object_path(path: &str) -> Option<(&str, &str)> {
    let segments = path.trim_start_matches('/').split('/').count();
    let object = (path.starts_with("/api/") && segments == 6) || (path.starts_with("/apis/") && segments == 7);
    if !object || !path.contains("/namespaces/") {
        return None;
    }
    path.rsplit_once('/')
}

fn status_response(code: u16, reason: &str, message: &str) -> hyper::Response<Body> {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": reason, "message": message, "code": code});
    json_response(code, &status)
}

fn json_response(status: u16, v: &Value) -> hyper::Response<Body> {
    let body = Full::new(Bytes::from(v.to_string())).boxed();
    hyper::Response::builder().status(status).header("content-type", "application/json").body(body).unwrap()
}

fn matches(object: &Value, label: Option<&str>, field: Option<&str>) -> bool {
    let label_ok = label.is_none_or(|sel| {
        sel.split(',').all(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            object["metadata"]["labels"][k].as_str() == Some(v)
        })
    });
    let field_ok = field.is_none_or(|sel| match sel.strip_prefix("metadata.name=") {
        Some(name) => object["metadata"]["name"].as_str() == Some(name),
        None => panic!("mock kube: unsupported fieldSelector {sel}"),
    });
    label_ok && field_ok
}

fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An InferencePool (v1) object.
pub fn pool(name: &str, selector: Value, ports: &[u16]) -> Value {
    let ports: Vec<Value> = ports.iter().map(|p| json!({"number": p})).collect();
    json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
           "metadata": {"name": name, "namespace": "ns"},
           "spec": {"selector": {"matchLabels": selector}, "targetPorts": ports,
                    "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}})
}

/// A pod object with `labels`, `ip` and a Ready condition.
pub fn pod(name: &str, labels: Value, ip: Option<&str>, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
           "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

/// Serves the discovery document of `group`/v1alpha2 with InferenceObjective and
/// InferenceModelRewrite (`llm-d.ai` or `inference.networking.x-k8s.io`).
pub fn serve_objective_crds(mock: &MockKube, group: &str) {
    mock.set_discovery(
        &format!("/apis/{group}/v1alpha2"),
        json!([
            {"name": "inferenceobjectives", "kind": "InferenceObjective", "namespaced": true},
            {"name": "inferencemodelrewrites", "kind": "InferenceModelRewrite", "namespaced": true},
        ]),
    );
}

/// An InferenceObjective of `group` referencing the v1 pool `pool`.
pub fn objective(group: &str, name: &str, pool: &str, priority: i32) -> Value {
    json!({"apiVersion": format!("{group}/v1alpha2"), "kind": "InferenceObjective",
           "metadata": {"name": name, "namespace": "ns"},
           "spec": {"priority": priority, "poolRef": {"group": "inference.networking.k8s.io", "name": pool}}})
}

/// An InferenceModelRewrite of `group` referencing the v1 pool `pool`, created at `created`.
pub fn model_rewrite(group: &str, name: &str, pool: &str, created: &str, rules: Value) -> Value {
    json!({"apiVersion": format!("{group}/v1alpha2"), "kind": "InferenceModelRewrite",
           "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
           "spec": {"poolRef": {"group": "inference.networking.k8s.io", "name": pool}, "rules": rules}})
}

/// The Kubernetes settings of `epp --pool-name vllm-pool --pool-namespace ns --kubeconfig PATH`,
/// parsed by epp's own CLI.
pub fn pool_settings(kubeconfig: &std::path::Path) -> epp::app::KubeSettings {
    use clap::Parser as _;
    let path = kubeconfig.to_str().expect("utf-8 path");
    let args = ["epp", "--pool-name", "vllm-pool", "--pool-namespace", "ns", "--kubeconfig", path];
    let cli = epp::cli::Cli::try_parse_from(args).expect("flags parse");
    cli.serve.kube_settings().expect("kubernetes settings").expect("a pool is configured")
}
