//! TLS of the ext_proc port, over rustls: `tls.crt` / `tls.key` from `--cert-path`, or an
//! in-memory self-signed certificate (as the Go EPPs do when no path is given; gateways accept
//! any certificate for the EPP cluster); `--tls-min-version`, `--tls-cipher-suites`, and with
//! `--enable-cert-reload` a certificate that follows changes of the files without a restart
//! ([`ReloadingCert`]: the files are re-read every [`TlsOptions::reload_interval`] and swapped
//! in when they changed and parse; new handshakes get the new pair, open connections keep
//! theirs). Handshakes run off the accept loop with a deadline ([`tls_incoming`]), so a silent
//! client never holds up others. ALPN offers `h2` (gRPC).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Why TLS material could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The certificate or key does not parse.
    #[error("TLS material: {0}")]
    Pem(String),
    /// A TLS option is invalid.
    #[error("{0}")]
    Option(String),
}

/// TLS settings of the ext_proc port.
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// Directory holding `tls.crt` and `tls.key`; `None` = self-signed.
    pub cert_path: Option<PathBuf>,
    /// Follow changes of the files (`--enable-cert-reload`).
    pub reload: bool,
    /// How often the files are checked when reloading.
    pub reload_interval: Duration,
    /// `--tls-min-version`.
    pub min_version: Option<String>,
    /// `--tls-cipher-suites` (comma-separated).
    pub cipher_suites: Option<String>,
    /// Deadline of one handshake.
    pub handshake_timeout: Duration,
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            cert_path: None,
            reload: false,
            reload_interval: Duration::from_secs(1),
            min_version: None,
            cipher_suites: None,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// The ready server TLS: the rustls config, and the reloading certificate when enabled.
#[derive(Debug)]
pub struct ServerTls {
    /// rustls server config (ALPN `h2`).
    pub config: Arc<ServerConfig>,
    /// The certificate source to run [`ReloadingCert::watch`] on (`--enable-cert-reload`).
    pub reloading: Option<Arc<ReloadingCert>>,
}

/// Builds the server TLS from `options`; warnings (ignored Go-only values) are returned.
pub fn server_tls(options: &TlsOptions) -> Result<(ServerTls, Vec<String>), TlsError> {
    let mut warnings = Vec::new();
    let mut provider = ring::default_provider();
    if let Some(list) = &options.cipher_suites {
        provider.cipher_suites = select_suites(&provider, list, &mut warnings)?;
    }
    let versions = protocol_versions(options.min_version.as_deref(), &mut warnings)?;
    let provider = Arc::new(provider);
    let (cert, key) = match &options.cert_path {
        Some(dir) => read_pair(dir)?,
        None => self_signed()?,
    };
    let certified = Arc::new(certified_key(&provider, &cert, &key)?);
    let reloading = match (&options.cert_path, options.reload) {
        (Some(dir), true) => Some(Arc::new(ReloadingCert {
            dir: dir.clone(),
            provider: provider.clone(),
            current: ArcSwap::new(certified.clone()),
        })),
        (None, true) => {
            warnings.push("--enable-cert-reload has no effect without --cert-path (self-signed certificate)".into());
            None
        }
        _ => None,
    };
    let resolver: Arc<dyn ResolvesServerCert> = match &reloading {
        Some(r) => r.clone(),
        None => Arc::new(FixedCert(certified)),
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| TlsError::Option(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((ServerTls { config: Arc::new(config), reloading }, warnings))
}

/// TLS of the metrics port (`--metrics-cert-dir`, `--metrics-client-ca-file`): `tls.crt` /
/// `tls.key` from `cert_dir` (self-signed when `None`); with `client_ca` (a PEM bundle) every
/// client must present a certificate it signed. ALPN `http/1.1`.
pub fn metrics_server_config(cert_dir: Option<&Path>, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(ring::default_provider());
    let (cert, key) = match cert_dir {
        Some(dir) => read_pair(dir)?,
        None => self_signed()?,
    };
    let certified = Arc::new(certified_key(&provider, &cert, &key)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Option(format!("TLS: {e}")))?;
    let builder = match client_ca {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| TlsError::Pem(format!("{}: {e}", path.display())))?;
                roots.add(cert).map_err(|e| TlsError::Pem(format!("{}: {e}", path.display())))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Pem(format!("{}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(FixedCert(certified)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn protocol_versions(
    min: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    let all = vec![&rustls::version::TLS13, &rustls::version::TLS12];
    let Some(min) = min.map(str::trim).filter(|m| !m.is_empty()) else { return Ok(all) };
    let normalized = min.to_ascii_lowercase().replace(['.', '_', ' '], "");
    let normalized = normalized.trim_start_matches("version").trim_start_matches("tls");
    match normalized {
        "10" | "11" => {
            warnings.push(format!("--tls-min-version={min}: TLS below 1.2 is not offered; the minimum is 1.2"));
            Ok(all)
        }
        "12" => Ok(all),
        "13" => Ok(vec![&rustls::version::TLS13]),
        _ => Err(TlsError::Option(format!(
            "--tls-min-version {min:?}: expected 1.2 or 1.3 (or VersionTLS12, VersionTLS13)"
        ))),
    }
}

/// The TLS 1.2 suites named in `list` (Go / IANA names) plus every TLS 1.3 suite (Go does not
/// let TLS 1.3 suites be configured either). Names rustls does not implement are skipped with a
/// warning; a list naming none it implements is an error.
fn select_suites(
    provider: &CryptoProvider,
    list: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<rustls::SupportedCipherSuite>, TlsError> {
    let canonical = |name: &str| {
        let n = name.trim().to_ascii_uppercase().replace("TLS13_", "TLS_");
        if n.ends_with("_CHACHA20_POLY1305") { format!("{n}_SHA256") } else { n }
    };
    let wanted: Vec<String> = list.split(',').map(canonical).filter(|n| !n.is_empty()).collect();
    let name_of = |s: &rustls::SupportedCipherSuite| canonical(&format!("{:?}", s.suite()));
    let mut chosen: Vec<rustls::SupportedCipherSuite> =
        provider.cipher_suites.iter().filter(|s| s.tls13().is_some()).copied().collect();
    let (mut any12, mut matched) = (false, false);
    for name in &wanted {
        let found = provider.cipher_suites.iter().find(|s| name_of(s) == *name);
        matched |= found.is_some();
        match found {
            Some(s) if s.tls13().is_some() => {}
            Some(s) => {
                if !chosen.contains(s) {
                    chosen.push(*s);
                }
                any12 = true;
            }
            None => warnings.push(format!("--tls-cipher-suites: {name} is not supported by epp's TLS; skipped")),
        }
    }
    if !matched {
        return Err(TlsError::Option(format!("--tls-cipher-suites {list:?}: none of these suites is supported")));
    }
    if !any12 {
        warnings.push("--tls-cipher-suites names no TLS 1.2 suite: only TLS 1.3 clients can connect".into());
    }
    Ok(chosen)
}

fn read_pair(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
    };
    Ok((read("tls.crt")?, read("tls.key")?))
}

fn certified_key(provider: &CryptoProvider, cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem(format!("tls.crt: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::Pem("tls.crt holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem(format!("tls.key: {e}")))?;
    let key = provider.key_provider.load_private_key(key).map_err(|e| TlsError::Pem(format!("tls.key: {e}")))?;
    Ok(CertifiedKey::new(certs, key))
}

/// A self-signed certificate (PEM cert, PEM key) for `localhost` and the EPP's service names.
pub fn self_signed() -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "epp".to_string()])?;
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "Inference Ext");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.subject_alt_names.push(rcgen::SanType::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
}

#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate under `--cert-path`, swapped when the files change (`--enable-cert-reload`).
#[derive(Debug)]
pub struct ReloadingCert {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl ReloadingCert {
    /// Re-reads the files every `interval` until `cancel`; a changed pair that parses is served
    /// from the next handshake on; one that does not is logged once and the previous one kept.
    pub async fn watch(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        let mut last = read_pair(&self.dir).ok();
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let pair = match read_pair(&self.dir) {
                Ok(pair) => pair,
                Err(error) => {
                    debug!(%error, "certificate files unreadable; keeping the served certificate");
                    continue;
                }
            };
            if last.as_ref() == Some(&pair) {
                continue;
            }
            match certified_key(&self.provider, &pair.0, &pair.1) {
                Ok(key) => {
                    self.current.store(Arc::new(key));
                    info!(dir = %self.dir.display(), "Serving certificate reloaded");
                }
                // A half-written pair (certificate updated, key not yet) resolves on a later tick.
                Err(error) => {
                    warn!(%error, dir = %self.dir.display(), "New certificate rejected; keeping the served one")
                }
            }
            last = Some(pair);
        }
    }
}

/// TLS connections over the accepted connections of `incoming` (the guarded accept loop of
/// `crate::net::incoming`) as a stream for tonic: each handshake runs in its own task with
/// `handshake_timeout`; accepting stops when `stop` fires.
pub fn tls_incoming<IO>(
    mut incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + Unpin + 'static,
    config: Arc<ServerConfig>,
    handshake_timeout: Duration,
    stop: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsStream<IO>, std::io::Error>>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tokio_stream::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tx.closed() => return,
                accepted = incoming.next() => match accepted {
                    Some(Ok(io)) => io,
                    Some(Err(error)) => {
                        debug!(%error, "accept failed");
                        continue;
                    }
                    None => return,
                },
            };
            let (acceptor, tx, stop) = (acceptor.clone(), tx.clone(), stop.clone());
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
                let stream = tokio::select! {
                    _ = stop.cancelled() => return,
                    done = handshake => match done {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => return debug!(%error, "TLS handshake failed"),
                        Err(_) => return debug!("TLS handshake timed out"),
                    },
                };
                let _ = tx.send(Ok(stream)).await;
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_like_go() {
        let mut w = Vec::new();
        assert_eq!(protocol_versions(Some("VersionTLS13"), &mut w).unwrap().len(), 1);
        assert_eq!(protocol_versions(Some("1.2"), &mut w).unwrap().len(), 2);
        assert!(w.is_empty());
        assert_eq!(protocol_versions(Some("1.0"), &mut w).unwrap().len(), 2);
        assert_eq!(w.len(), 1);
        assert!(protocol_versions(Some("1.4"), &mut w).is_err());

        let provider = ring::default_provider();
        let mut w = Vec::new();
        let list =
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305";
        let suites = select_suites(&provider, list, &mut w).unwrap();
        let tls12: Vec<String> =
            suites.iter().filter(|s| s.tls13().is_none()).map(|s| format!("{:?}", s.suite())).collect();
        assert_eq!(tls12, ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"]);
        assert!(suites.iter().any(|s| s.tls13().is_some()));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(select_suites(&provider, "TLS_RSA_WITH_RC4_128_SHA", &mut Vec::new()).is_err());
    }
}
