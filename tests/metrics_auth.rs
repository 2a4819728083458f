//! `--metrics-endpoint-auth` against the mock API server: /metrics needs a bearer token that
//! a TokenReview authenticates and a SubjectAccessReview allows to `get /metrics` (401
//! without or with a bad token, 403 for a user without the right); verdicts are cached;
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
