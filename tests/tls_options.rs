//! TLS beyond the defaults: the served certificate follows `--cert-path` changes with
//! `--enable-cert-reload`, `--tls-min-version 1.3` refuses TLS 1.2 clients, and model-server
//! metrics are scraped over HTTPS (`--model-server-metrics-scheme https`) from a real TLS
//! server on loopback, verifying or not as told.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use epp::http_client::{ServerCheck, client_tls};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

fn write_pair(dir: &std::path::Path, pair: &(Vec<u8>, Vec<u8>)) {
    std::fs::write(dir.join("tls.crt"), &pair.0).unwrap();
    std::fs::write(dir.join("tls.key"), &pair.1).unwrap();
}

async fn connect_trusting(addr: SocketAddr, ca: &[u8]) -> Result<Channel, tonic::transport::Error> {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name("localhost");
    Channel::from_shared(format!("https://{addr}")).unwrap().tls_config(tls).unwrap().connect().await
}

#[tokio::test]
async fn served_certificate_follows_the_files_with_cert_reload() {
    let pod = FakeVllm::start([127, 0, 5, 1], 0, 0, 0.0).await;
    let certs = tempfile::tempdir().unwrap();
    let first = epp::tls::self_signed().unwrap();
    write_pair(certs.path(), &first);
    let dir = certs.path().to_path_buf();
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, move |s| {
        s.secure_serving = true;
        s.cert_path = Some(dir);
        s.tls.reload = true;
        s.tls.reload_interval = Duration::from_millis(20);
    })
    .await;
    connect_trusting(epp.app.grpc_addr, &first.0).await.expect("first certificate served");

    let second = epp::tls::self_signed().unwrap();
    write_pair(certs.path(), &second);
    let deadline = std::time::Instant::now() + WAIT;
    let channel = loop {
        match connect_trusting(epp.app.grpc_addr, &second.0).await {
            Ok(channel) => break channel,
            Err(error) => assert!(std::time::Instant::now() < deadline, "new certificate never served: {error:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The reloaded certificate serves ext_proc, and the old one is no longer trusted.
    let mut client = epp::proto::ext_proc::external_processor_client::ExternalProcessorClient::new(channel);
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    assert!(connect_trusting(epp.app.grpc_addr, &first.0).await.is_err());

    // A broken pair is rejected; the served certificate stays.
    std::fs::write(certs.path().join("tls.crt"), b"not a certificate").unwrap();
    connect_trusting(epp.app.grpc_addr, &second.0).await.expect("still the second certificate");
}

#[tokio::test]
async fn tls_min_version_1_3_refuses_tls_1_2_clients() {
    let pod = FakeVllm::start([127, 0, 5, 2], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |s| {
        s.secure_serving = true;
        s.tls.min_version = Some("VersionTLS13".into());
    })
    .await;
    let handshake = |versions: &'static [&'static rustls::SupportedProtocolVersion]| async move {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(epp::http_client::any_server_verifier())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(epp.app.grpc_addr).await.unwrap();
        connector.connect(rustls::pki_types::ServerName::try_from("localhost").unwrap(), tcp).await.map(|_| ())
    };
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    static TLS12_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];
    assert!(handshake(&TLS13_ONLY).await.is_ok());
    assert!(handshake(&TLS12_ONLY).await.is_err());
}

/// A TLS server on `ip` with a self-signed certificate (SAN 127.0.0.1 only) answering `body`
/// on `/metrics` and `/prometheus/metrics`, 404 elsewhere.
async fn https_metrics(ip: [u8; 4], body: String) -> (SocketAddr, Vec<u8>) {
    let (cert, key) = epp::tls::self_signed().unwrap();
    let options = epp::tls::TlsOptions::default();
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), &(cert.clone(), key));
    let (tls, _) =
        epp::tls::server_tls(&epp::tls::TlsOptions { cert_path: Some(dir.path().into()), ..options }).unwrap();
    let mut config = (*tls.config).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((ip, 0))).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let known = matches!(req.uri().path(), "/metrics" | "/prometheus/metrics");
                    let mut response = hyper::Response::new(Full::new(Bytes::from(body.clone())));
                    if !known {
                        *response.status_mut() = hyper::StatusCode::NOT_FOUND;
                    }
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (addr, cert)
}

#[tokio::test]
async fn metrics_are_scraped_over_https_with_path_and_port_overrides() {
    let (metrics, _) = https_metrics([127, 0, 5, 3], exposition(7, 2, 0.5)).await;
    // The endpoint's own port is a different (closed) one: --model-server-metrics-port wins.
    let serving = SocketAddr::from(([127, 0, 5, 3], common::process::free_port()));
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", serving, &[])]), None, |s| {
        s.scrape_flags.https = true;
        s.scrape_flags.port = Some(metrics.port());
        s.scrape_flags.path = Some("/prometheus/metrics".into());
    })
    .await;
    epp.wait_waiting(&[("pod", 7)]).await;
    // A path the server does not know: every scrape fails (404) and is counted.
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", serving, &[])]), None, |s| {
        s.scrape_flags.https = true;
        s.scrape_flags.port = Some(metrics.port());
        s.scrape_flags.path = Some("/nope".into());
    })
    .await;
    let deadline = std::time::Instant::now() + WAIT;
    while !scrape(epp.app.metrics_addr)
        .await
        .contains("llm_d_epp_datalayer_poll_errors_total{source_type=\"metrics-data-source\"}")
    {
        assert!(std::time::Instant::now() < deadline, "404 scrapes not counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(epp.app.store.snapshot().get("pod").unwrap().metrics.load().updated_at.is_none());
}

#[tokio::test]
async fn https_verification_trusts_only_known_issuers() {
    // The certificate names 127.0.0.1 (and localhost): verification checks the name too.
    let (addr, cert) = https_metrics([127, 0, 0, 1], exposition(1, 0, 0.0)).await;
    let url = format!("https://{addr}/metrics");
    let get = |check: ServerCheck| {
        let url = url.clone();
        async move {
            let client = epp::endpoints::poll::client_with_tls(WAIT, 1, client_tls(&check).unwrap());
            epp::endpoints::poll::get(&client, &url, "text/plain", WAIT, 1 << 20).await
        }
    };
    let body = get(ServerCheck::Verify { extra_roots_pem: cert }).await.expect("trusted issuer");
    assert!(String::from_utf8_lossy(&body).contains("vllm:num_requests_waiting"));
    let (other, _) = epp::tls::self_signed().unwrap();
    let refused = get(ServerCheck::Verify { extra_roots_pem: other }).await.unwrap_err();
    assert!(format!("{refused:?}").to_lowercase().contains("certificate"), "{refused:?}");
    get(ServerCheck::SkipVerify).await.expect("insecure-skip-verify accepts it");
    let (wrong_name, cert) = https_metrics([127, 0, 5, 4], exposition(1, 0, 0.0)).await;
    let client = epp::endpoints::poll::client_with_tls(
        WAIT,
        1,
        client_tls(&ServerCheck::Verify { extra_roots_pem: cert }).unwrap(),
    );
    let url = format!("https://{wrong_name}/metrics");
    let refused = epp::endpoints::poll::get(&client, &url, "text/plain", WAIT, 1 << 20).await.unwrap_err();
    assert!(format!("{refused:?}").contains("NotValidForName"), "{refused:?}");
}
