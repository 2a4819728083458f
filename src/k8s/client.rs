//! A minimal Kubernetes API client on hyper HTTP/1.1: one connection per call, plain TCP or
//! TLS (rustls, trusting only the configured CA), a bearer token when configured. `get`
//! returns a whole JSON body; `watch` returns the body of a watch as a stream of lines
//! (newline-delimited JSON events). It knows nothing about object types.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types};

use super::config::{ClusterConfig, ConfigError, Token};

/// Longest accepted JSON line of a watch (one object) or LIST body.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// TCP connect, TLS handshake or HTTP failure.
    #[error("connection to the API server failed: {0}")]
    Connect(String),
    /// The server answered with a non-2xx status.
    #[error("API server answered {status}: {message}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Start of the response body (a `Status` object's message).
        message: String,
    },
    /// Reading the body failed or it exceeded [`MAX_BODY_BYTES`].
    #[error("reading the response failed: {0}")]
    Body(String),
    /// The call did not finish in time.
    #[error("API call timed out")]
    Timeout,
    /// TLS or token settings are unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ClientError {
    /// True for HTTP 410 Gone (the resource version is too old: relist).
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Status { status: 410, .. })
    }
}

/// A cheap-to-clone API client.
#[derive(Clone)]
pub struct ApiClient {
    config: Arc<ClusterConfig>,
    tls: Option<TlsConnector>,
    timeout: Duration,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient").field("server", &self.config.server).finish_non_exhaustive()
    }
}

impl ApiClient {
    /// Builds a client; for https the CA bundle must be present and parse. `timeout` bounds
    /// connecting and each non-watch call.
    pub fn new(config: ClusterConfig, timeout: Duration) -> Result<Self, ClientError> {
        let tls = if config.server.https {
            let pem = config.ca_pem.as_deref().ok_or_else(|| {
                ConfigError::Invalid("https API server without a CA certificate (certificate-authority)".into())
            })?;
            let mut roots = RootCertStore::empty();
            use pki_types::pem::PemObject;
            for cert in pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| ConfigError::Invalid(format!("CA certificate: {e}")))?;
                roots.add(cert).map_err(|e| ConfigError::Invalid(format!("CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(ConfigError::Invalid("CA bundle holds no certificate".into()).into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let tls = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| ConfigError::Invalid(format!("TLS: {e}")))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Some(TlsConnector::from(Arc::new(tls)))
        } else {
            None
        };
        Ok(Self { config: Arc::new(config), tls, timeout })
    }

    /// The cluster settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// GETs `path_and_query` and returns the whole body of a 2xx answer.
    pub async fn get(&self, path_and_query: &str) -> Result<Bytes, ClientError> {
        let call = async {
            let resp = self.send(path_and_query).await?;
            let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY_BYTES);
            body.collect().await.map(|b| b.to_bytes()).map_err(|e| ClientError::Body(e.to_string()))
        };
        tokio::time::timeout(self.timeout, call).await.map_err(|_| ClientError::Timeout)?
    }

    /// Opens a watch: GETs `path_and_query` and returns its body as lines once the server
    /// answered 2xx. Connecting is bounded by the client timeout; reading is not.
    pub async fn watch(&self, path_and_query: &str) -> Result<LineStream, ClientError> {
        let resp =
            tokio::time::timeout(self.timeout, self.send(path_and_query)).await.map_err(|_| ClientError::Timeout)??;
        Ok(LineStream { body: resp.into_body(), buf: BytesMut::new(), scanned: 0, done: false })
    }

    async fn send(&self, path_and_query: &str) -> Result<hyper::Response<Incoming>, ClientError> {
        let server = &self.config.server;
        let tcp = TcpStream::connect(server.authority()).await.map_err(|e| ClientError::Connect(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let token = match &self.config.token {
            Token::None => None,
            Token::Static(t) => Some(t.clone()),
            Token::File(p) => Some(
                tokio::fs::read_to_string(p)
                    .await
                    .map_err(|source| ConfigError::Read { path: p.clone(), source })?
                    .trim()
                    .to_string(),
            ),
        };
        let mut req = hyper::Request::get(path_and_query)
            .header(hyper::header::HOST, server.authority())
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, concat!("epp/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| ClientError::Connect(e.to_string()))?;
        let resp = match &self.tls {
            Some(tls) => {
                let name = pki_types::ServerName::try_from(server.host.clone())
                    .map_err(|e| ConfigError::Invalid(format!("server name {:?}: {e}", server.host)))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| ClientError::Connect(e.to_string()))?;
                request(TokioIo::new(stream), req).await?
            }
            None => request(TokioIo::new(tcp), req).await?,
        };
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let body = http_body_util::Limited::new(resp.into_body(), 4096).collect().await;
            let message = body.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned()).unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        Ok(resp)
    }
}

async fn request<S>(io: TokioIo<S>, req: hyper::Request<Empty<Bytes>>) -> Result<hyper::Response<Incoming>, ClientError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = http1::handshake(io).await.map_err(|e| ClientError::Connect(e.to_string()))?;
    // The connection task ends when the response body is dropped or fully read.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| ClientError::Connect(e.to_string()))
}

/// The body of a watch, split into non-empty lines.
#[derive(Debug)]
pub struct LineStream {
    body: Incoming,
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline (a long line is scanned once).
    scanned: usize,
    done: bool,
}

impl LineStream {
    /// The next line without its newline; `Ok(None)` when the server ended the stream.
    pub async fn next_line(&mut self) -> Result<Option<Bytes>, ClientError> {
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|b| *b == b'\n').map(|i| i + self.scanned) {
                self.scanned = 0;
                let line = self.buf.split_to(i + 1).freeze();
                let line = line.slice(..i);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.done {
                // A last line without a newline still counts.
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.buf).freeze()));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_BODY_BYTES {
                return Err(ClientError::Body(format!("watch line longer than {MAX_BODY_BYTES} bytes")));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
                Some(Err(e)) => return Err(ClientError::Body(e.to_string())),
                None => self.done = true,
            }
        }
    }
}
