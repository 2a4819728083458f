//! `--metrics-endpoint-auth` against the mock API server: /metrics needs a bearer token that
//! a TokenReview authenticates and a SubjectAccessReview allows to `get /metrics` (401
//! without or with a bad token, 403 for a user without the right), and so do `/debug/pprof/`
//! and `/debug/state`; verdicts are cached;
//! /healthz and /readyz stay open; without Kubernetes access or with the flag off /metrics is
//! open.

mod common;

use std::net::SocketAddr;

use common::kube::MockKube;
use epp::app::{App, KubeSettings, Settings};
use epp::k8s::client::KubeSource;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Status code and body of `GET path` with an optional bearer token.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: epp\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(common::WAIT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let code = response.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status line");
    (code, response)
}

async fn app(kube: Option<&std::path::Path>, auth: bool) -> App {
    let mut settings = Settings::loopback();
    settings.metrics_auth = auth;
    settings.kubernetes = kube.map(|path| KubeSettings {
        cluster: KubeSource::Kubeconfig(path.to_path_buf()),
        namespace: "ns".into(),
        pool: None,
        standalone: None,
        watch: Default::default(),
        leader_election: None,
    });
    App::start(settings).await.expect("epp starts")
}

#[tokio::test]
async fn metrics_need_an_authorised_token() {
    let mock = MockKube::start().await;
    mock.add_user("reader-token", "system:serviceaccount:monitoring:prometheus");
    mock.add_user("other-token", "system:serviceaccount:ns:someone");
    mock.allow_metrics("system:serviceaccount:monitoring:prometheus");
    let dir = tempfile::tempdir().unwrap();
    let epp = app(Some(&mock.kubeconfig(dir.path())), true).await;
    let addr = epp.metrics_addr;

    assert_eq!(get(addr, "/metrics", None).await.0, 401, "no token");
    assert_eq!(get(addr, "/metrics", Some("forged")).await.0, 401, "unknown token");
    assert_eq!(get(addr, "/metrics", Some("other-token")).await.0, 403, "user without the right");
    let (code, body) = get(addr, "/metrics", Some("reader-token")).await;
    assert_eq!(code, 200);
    assert!(body.contains("epp_k8s_watch_events_total") || body.contains("# TYPE"), "{body}");
    assert_eq!(mock.reviews(), (3, 2), "one TokenReview per token, a SubjectAccessReview per user");
    // Cached: neither the allowed nor the denied verdict asks again.
    assert_eq!(get(addr, "/metrics", Some("reader-token")).await.0, 200);
    assert_eq!(get(addr, "/metrics", Some("other-token")).await.0, 403);
    assert_eq!(mock.reviews(), (3, 2));
    // /debug/* is behind the same guard.
    for path in ["/debug/pprof/", "/debug/pprof/heap", "/debug/state"] {
        assert_eq!(get(addr, path, None).await.0, 401, "{path} without a token");
        assert_eq!(get(addr, path, Some("other-token")).await.0, 403, "{path} for a user without the right");
        assert_eq!(get(addr, path, Some("reader-token")).await.0, 200, "{path} for the reader");
    }
    assert_eq!(get(addr, "/debug/pprof/profile?seconds=1", None).await.0, 401, "no profile without a token");
    // Probes stay open.
    assert_eq!(get(addr, "/healthz", None).await.0, 200);
    // /readyz answers its own verdict (503 here: no endpoints), never 401.
    let (code, body) = get(addr, "/readyz", None).await;
    assert!(code == 200 || (code == 503 && body.contains("not ready")), "{body}");
    epp.shutdown().await;

    // The flag off: open.
    let open = app(Some(&mock.kubeconfig(dir.path())), false).await;
    assert_eq!(get(open.metrics_addr, "/metrics", None).await.0, 200);
    open.shutdown().await;
}

#[tokio::test]
async fn metrics_are_open_without_kubernetes_access() {
    let epp = app(None, true).await;
    assert_eq!(get(epp.metrics_addr, "/metrics", None).await.0, 200);
    epp.shutdown().await;
}

/// `GET /metrics` over TLS trusting `ca_pem`, with an optional client certificate; the status
/// code, or `None` when the handshake or request failed.
async fn get_tls(addr: SocketAddr, ca_pem: &str, client: Option<(String, String)>) -> Option<u16> {
    use std::sync::Arc;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.ok()?;
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: epp\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(common::WAIT, tls.read_to_string(&mut response)).await.ok()?.ok()?;
    response.split(' ').nth(1).and_then(|c| c.parse().ok())
}

#[tokio::test]
async fn metrics_port_serves_tls_and_checks_client_certificates() {
    use epp::app::MetricsTls;
    // The TLS mock's CA material: a CA, a server certificate for 127.0.0.1 and a client one.
    let material = MockKube::start_tls(&[]).await.tls.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::write(certs.join("tls.crt"), &material.server_cert_pem).unwrap();
    std::fs::write(certs.join("tls.key"), &material.server_key_pem).unwrap();
    let ca_file = dir.path().join("client-ca.pem");
    std::fs::write(&ca_file, &material.ca_pem).unwrap();

    let mut settings = Settings::loopback();
    settings.metrics_tls = Some(MetricsTls { cert_dir: Some(certs.clone()), client_ca: None });
    let epp = App::start(settings).await.unwrap();
    assert_eq!(get_tls(epp.metrics_addr, &material.ca_pem, None).await, Some(200), "TLS without client check");
    // Plain HTTP on the TLS port gets no HTTP answer (the handshake fails, the connection closes).
    let mut plain = tokio::net::TcpStream::connect(epp.metrics_addr).await.unwrap();
    plain.write_all(b"GET /metrics HTTP/1.1\r\nHost: epp\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, plain.read_to_end(&mut answer)).await.expect("closed in time");
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP on the TLS port is not served");
    epp.shutdown().await;

    let mut settings = Settings::loopback();
    settings.metrics_tls = Some(MetricsTls { cert_dir: Some(certs), client_ca: Some(ca_file) });
    let epp = App::start(settings).await.unwrap();
    let client = (material.client_cert_pem.clone(), material.client_key_pem.clone());
    assert_eq!(get_tls(epp.metrics_addr, &material.ca_pem, Some(client)).await, Some(200));
    assert_eq!(get_tls(epp.metrics_addr, &material.ca_pem, None).await, None, "no client certificate: refused");
    epp.shutdown().await;
}
