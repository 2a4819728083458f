//! TLS material for the ext_proc port: `tls.crt` / `tls.key` from `--cert-path`, or an
//! in-memory self-signed certificate (as the Go EPPs do when no path is given; gateways
//! accept any certificate for the EPP cluster).

use std::path::Path;

use tonic::transport::{Identity, ServerTlsConfig};

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
}

/// The server TLS config: from `dir` when given, else self-signed.
pub fn server_tls(dir: Option<&Path>) -> Result<ServerTlsConfig, TlsError> {
    let (cert, key) = match dir {
        Some(dir) => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
            };
            (read("tls.crt")?, read("tls.key")?)
        }
        None => self_signed()?,
    };
    Ok(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
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
