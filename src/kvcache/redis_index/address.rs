//! `redisConfig.address` as llm-d reads it: `redis://`, `rediss://` and `unix://` are taken
//! as they are, `valkey://` / `valkeys://` become `redis://` / `rediss://`, and anything else
//! gets `redis://` prepended (`127.0.0.1:6379`). The result must then be a URL the client
//! library accepts; the password never appears in errors.

/// An address the client cannot use.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    /// Empty string.
    #[error("address is empty (e.g. redis://127.0.0.1:6379)")]
    Empty,
    /// A scheme other than the supported ones.
    #[error("unsupported scheme in {0:?} (redis://, rediss://, unix://, valkey://, valkeys://, or host:port)")]
    Scheme(String),
    /// The client library refuses it.
    #[error("{url}: {source}")]
    Invalid {
        /// Redacted URL.
        url: String,
        /// Why.
        #[source]
        source: redis::RedisError,
    },
}

const KEPT: &[&str] = &["redis://", "rediss://", "unix://"];

/// The URL llm-d would connect to for `address`.
pub fn normalize(address: &str) -> Result<String, AddressError> {
    let a = address.trim();
    if a.is_empty() {
        return Err(AddressError::Empty);
    }
    if KEPT.iter().any(|s| a.starts_with(s)) {
        return Ok(a.to_string());
    }
    if let Some(rest) = a.strip_prefix("valkey://") {
        return Ok(format!("redis://{rest}"));
    }
    if let Some(rest) = a.strip_prefix("valkeys://") {
        return Ok(format!("rediss://{rest}"));
    }
    if a.contains("://") {
        return Err(AddressError::Scheme(redact(a)));
    }
    Ok(format!("redis://{a}"))
}

/// A client for `address` (no connection is made).
pub fn client(address: &str) -> Result<redis::Client, AddressError> {
    let url = normalize(address)?;
    redis::Client::open(url.as_str()).map_err(|source| AddressError::Invalid { url: redact(&url), source })
}

/// `url` with the password after `user:` replaced.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.split_once('@') {
        Some((auth, host)) if auth.contains(':') => {
            let user = auth.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_llm_d() {
        for (given, want) in [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("rediss://r.example:6380/1", "rediss://r.example:6380/1"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
            ("valkey://v:6379", "redis://v:6379"),
            ("valkeys://v:6379", "rediss://v:6379"),
            ("127.0.0.1:6379", "redis://127.0.0.1:6379"),
            (" redis-master:6379 ", "redis://redis-master:6379"),
        ] {
            assert_eq!(normalize(given).expect(given), want);
        }
    }

    #[test]
    fn rejects_bad_addresses_without_leaking_passwords() {
        assert!(matches!(normalize(""), Err(AddressError::Empty)));
        let e = normalize("http://u:secret@h:1").expect_err("scheme").to_string();
        assert!(e.contains("unsupported scheme") && !e.contains("secret"), "{e}");
        let e = client("redis://u:secret@h:notaport").expect_err("port").to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(client("redis://127.0.0.1:6379").is_ok());
    }
}
