//! The pooled outbound HTTP/1.1 client shared by epp's outbound callers (vLLM render, latency
//! predictor, the per-endpoint pollers): Nagle off, bounded connect time, idle connections
//! kept 90 s; plain HTTP, or HTTP and HTTPS over rustls (hyper-rustls) for the pollers
//! (`--model-server-metrics-scheme https`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio_rustls::rustls::{self, ClientConfig};

/// A client sending `Full` bodies.
pub fn pooled(connect_timeout: Duration, max_idle_per_host: usize) -> Client<HttpConnector, Full<Bytes>> {
    pooled_for(connect_timeout, max_idle_per_host)
}

fn connector(connect_timeout: Duration) -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    connector
}

fn builder(max_idle_per_host: usize) -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_idle_timeout(Duration::from_secs(90)).pool_max_idle_per_host(max_idle_per_host);
    builder
}

/// A client for request bodies of type `B` with at most `max_idle_per_host` idle connections
/// per host.
pub fn pooled_for<B>(connect_timeout: Duration, max_idle_per_host: usize) -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    builder(max_idle_per_host).build(connector(connect_timeout))
}

/// Like [`pooled_for`], for `http://` and `https://` URLs; HTTPS uses `tls`.
pub fn pooled_https_for<B>(
    connect_timeout: Duration,
    max_idle_per_host: usize,
    tls: ClientConfig,
) -> Client<HttpsConnector<HttpConnector>, B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = connector(connect_timeout);
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    builder(max_idle_per_host).build(https)
}

/// How an HTTPS client checks servers.
#[derive(Clone, Debug)]
pub enum ServerCheck {
    /// Verify against the system roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured) plus
    /// these PEM certificates.
    Verify {
        /// Extra trusted certificates (PEM).
        extra_roots_pem: Vec<u8>,
    },
    /// Accept any certificate (`--model-server-metrics-https-insecure-skip-verify`, Go's
    /// `InsecureSkipVerify`); the handshake signature is still checked.
    SkipVerify,
}

/// A rustls client config (ring provider, TLS 1.2 and 1.3) checking servers as `check` says.
/// Errors when verification is asked for and no trusted certificate is available.
pub fn client_tls(check: &ServerCheck) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match check {
        ServerCheck::SkipVerify => {
            builder.dangerous().with_custom_certificate_verifier(any_server_verifier()).with_no_client_auth()
        }
        ServerCheck::Verify { extra_roots_pem } => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            for cert in CertificateDer::pem_slice_iter(extra_roots_pem) {
                roots
                    .add(cert.map_err(|e| format!("CA certificate: {e}"))?)
                    .map_err(|e| format!("CA certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err("HTTPS verification needs trusted certificates: none found in the system store \
                     (set SSL_CERT_FILE) and none given"
                    .into());
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(config)
}

/// The verifier of [`ServerCheck::SkipVerify`] (ring provider), for callers building their own
/// rustls config.
pub fn any_server_verifier() -> Arc<dyn rustls::client::danger::ServerCertVerifier> {
    Arc::new(AnyServer(Arc::new(rustls::crypto::ring::default_provider())))
}

/// Accepts every server certificate but still checks that the server holds its key.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
