//! Replica-sync flags (`ReplicaArgs`, flattened into the serve flags) and the validated
//! runtime settings (`SyncSettings`). The URL is checked here (scheme and syntax) so a typo
//! fails at start; its password never reaches a log line (`redacted`).

use std::time::Duration;

/// `--replica-sync-*` flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ReplicaArgs {
    /// Share approximate-prefix entries, speculative entries, in-flight load and session
    /// bindings with the other replicas through this Redis or Valkey (`redis://`, `rediss://`,
    /// `unix://`, `valkey://`, `valkeys://`); unset: off (docs/replicas.md).
    #[arg(long, env = "EPP_REPLICA_SYNC_URL")]
    pub replica_sync_url: Option<String>,
    /// Redis stream key shared by the replicas of one pool.
    #[arg(long, default_value = DEFAULT_KEY)]
    pub replica_sync_key: String,
    /// Stream entries Redis retains (approximate trim): the catch-up window.
    #[arg(long, default_value_t = DEFAULT_STREAM_LEN)]
    pub replica_sync_stream_len: u64,
    /// Heartbeat period: liveness and in-flight totals (Go duration syntax).
    #[arg(long, default_value = "1s", value_parser = crate::net::limits::parse_go_duration)]
    pub replica_sync_heartbeat: Duration,
    /// How long updates collect before they go out as one batch of stream entries (Go
    /// duration syntax; 0: as soon as the publisher gets to them).
    #[arg(long, default_value = "5ms", value_parser = crate::net::limits::parse_go_duration)]
    pub replica_sync_batch_window: Duration,
}

/// Default stream key.
pub const DEFAULT_KEY: &str = "epp:replica-sync";
/// Default batch window.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(5);
/// Default retained entries.
/// (At 5,000 decisions/s over four replicas an entry held ~9 updates, ~3.5 KB: ~70 MB of
/// Redis memory and ~36 s of history at this length; docs/replicas.md#measured.)
pub const DEFAULT_STREAM_LEN: u64 = 20_000;

/// Validated settings.
#[derive(Clone, Debug)]
pub struct SyncSettings {
    /// Redis URL (may hold credentials: log [`SyncSettings::redacted`]).
    pub url: String,
    /// Stream key.
    pub key: String,
    /// Entries retained.
    pub stream_len: u64,
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// Bounded publish queue, in messages.
    pub queue: usize,
    /// How long updates collect before the publisher writes them.
    pub batch_window: Duration,
}

/// Why the settings are invalid.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Unknown or missing scheme.
    #[error("--replica-sync-url: unsupported scheme in {0:?} (redis://, rediss://, unix://, valkey://, valkeys://)")]
    Scheme(String),
    /// The client library refuses the URL.
    #[error("--replica-sync-url {url}: {source}")]
    Url {
        /// Redacted URL.
        url: String,
        /// The parse error.
        #[source]
        source: redis::RedisError,
    },
    /// A value out of range.
    #[error("{0}")]
    Range(&'static str),
}

const SCHEMES: &[&str] = &["redis://", "rediss://", "unix://", "redis+unix://", "valkey://", "valkeys://"];

impl SyncSettings {
    /// Defaults for `url` (tests, tools).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key: DEFAULT_KEY.into(),
            stream_len: DEFAULT_STREAM_LEN,
            heartbeat: Duration::from_secs(1),
            queue: 16_384,
            batch_window: DEFAULT_BATCH_WINDOW,
        }
    }

    /// The URL without its password.
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }

    /// Checks the URL and ranges; returns the client to connect with.
    pub fn client(&self) -> Result<redis::Client, SettingsError> {
        if !SCHEMES.iter().any(|s| self.url.starts_with(s)) {
            return Err(SettingsError::Scheme(self.redacted()));
        }
        if self.key.is_empty() {
            return Err(SettingsError::Range("--replica-sync-key must not be empty"));
        }
        if self.stream_len == 0 {
            return Err(SettingsError::Range("--replica-sync-stream-len must be > 0"));
        }
        if self.heartbeat.is_zero() {
            return Err(SettingsError::Range("--replica-sync-heartbeat must be > 0"));
        }
        if self.batch_window >= self.heartbeat {
            return Err(SettingsError::Range("--replica-sync-batch-window must be shorter than the heartbeat"));
        }
        redis::Client::open(self.url.as_str()).map_err(|source| SettingsError::Url { url: self.redacted(), source })
    }
}

impl ReplicaArgs {
    /// The settings, or `None` when sync is off.
    pub fn settings(&self) -> Option<SyncSettings> {
        let url = self.replica_sync_url.clone().filter(|u| !u.is_empty())?;
        Some(SyncSettings {
            key: self.replica_sync_key.clone(),
            stream_len: self.replica_sync_stream_len,
            heartbeat: self.replica_sync_heartbeat,
            batch_window: self.replica_sync_batch_window,
            ..SyncSettings::new(url)
        })
    }
}

/// `scheme://user:password@host` -> `scheme://user:***@host`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{tail}"),
            None => format!("{scheme}://***@{host}{tail}"),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_window_must_be_shorter_than_the_heartbeat() {
        let long = SyncSettings { batch_window: Duration::from_secs(1), ..SyncSettings::new("redis://h") };
        assert!(matches!(long.client(), Err(SettingsError::Range(_))));
        let none = SyncSettings { batch_window: Duration::ZERO, ..SyncSettings::new("redis://h") };
        assert!(none.client().is_ok());
    }

    #[test]
    fn urls_are_checked_and_redacted() {
        for ok in ["redis://127.0.0.1:6379", "rediss://h:1/0", "unix:///tmp/r.sock", "valkey://h:6379"] {
            assert!(SyncSettings::new(ok).client().is_ok(), "{ok}");
        }
        assert!(matches!(SyncSettings::new("http://h:1").client(), Err(SettingsError::Scheme(_))));
        assert!(matches!(
            SyncSettings { stream_len: 0, ..SyncSettings::new("redis://h") }.client(),
            Err(SettingsError::Range(_))
        ));
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
        let off = ReplicaArgs { replica_sync_url: Some(String::new()), ..Default::default() };
        assert!(off.settings().is_none());
    }
}
