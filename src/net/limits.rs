//! What a peer may make epp hold, as flags (`LimitArgs`, flattened into `ServeArgs`) and as
//! runtime settings (`Limits`): connection caps and timeouts of every listener, HTTP/2
//! stream and keep-alive settings, and the age after which endpoint metrics are unknown.
//! Defaults follow what operators of Envoy / linkerd expect (see docs/security.md).

use std::time::Duration;

/// Limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Most connections held at once; more are accepted and closed at once (counted).
    pub max_connections: usize,
    /// A connection must start its first request within this time (TLS + HTTP/2 preface +
    /// first request headers), else it is closed.
    pub handshake_timeout: Duration,
    /// A connection with no open request (stream) for this long is closed.
    pub idle_timeout: Duration,
}

/// All limits of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The ext_proc listener.
    pub ext_proc: ListenerLimits,
    /// The gRPC health and admin (`/metrics`, `/healthz`) listeners, each.
    pub admin: ListenerLimits,
    /// HTTP/2 PING interval on idle gRPC connections (`None`: off).
    pub http2_keepalive_interval: Option<Duration>,
    /// A PING not answered within this time closes the connection.
    pub http2_keepalive_timeout: Duration,
    /// TCP keep-alive probe time (`None`: off).
    pub tcp_keepalive: Option<Duration>,
    /// Most concurrent streams per HTTP/2 connection (`None`: unlimited).
    pub max_concurrent_streams: Option<u32>,
    /// Endpoint metrics older than this (or never scraped) are unknown.
    pub metrics_staleness_threshold: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        LimitArgs::default().limits()
    }
}

/// Parses a Go-style duration (`2s`, `500ms`, `1m30s`).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Connection-hygiene and input-limit flags.
#[derive(Clone, Debug, clap::Args)]
pub struct LimitArgs {
    /// Endpoint metrics older than this, never scraped or invalid make the endpoint's load
    /// unknown: it ranks below every endpoint with known load (Go duration syntax).
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub metrics_staleness_threshold: Duration,
    /// Most concurrent connections on the ext_proc port; more are closed on accept.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Most concurrent connections on each of the gRPC health and admin ports.
    #[arg(long, default_value_t = 64)]
    pub max_admin_connections: usize,
    /// Time a new connection has to complete TLS and HTTP/2 setup and start its first request.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub http2_handshake_timeout: Duration,
    /// A connection without open requests for this long is closed (clients reconnect).
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub idle_connection_timeout: Duration,
    /// HTTP/2 PING interval on gRPC connections (0 = off); an unanswered PING closes the
    /// connection after --http2-keepalive-timeout.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub http2_keepalive_interval: Duration,
    /// How long an HTTP/2 PING may stay unanswered.
    #[arg(long, default_value = "20s", value_parser = parse_go_duration)]
    pub http2_keepalive_timeout: Duration,
    /// TCP keep-alive probe time on accepted connections (0 = off).
    #[arg(long, default_value = "60s", value_parser = parse_go_duration)]
    pub tcp_keepalive: Duration,
    /// Most concurrent streams (requests) per HTTP/2 connection (0 = unlimited); Envoy opens
    /// further connections when it needs more.
    #[arg(long, default_value_t = 1024)]
    pub max_concurrent_streams: u32,
    /// An ext_proc stream on which the client sends nothing while epp has nothing of it in
    /// hand for this long ends with DEADLINE_EXCEEDED (0 = never; docs/security.md).
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub idle_stream_timeout: Duration,
}

impl Default for LimitArgs {
    fn default() -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            args: LimitArgs,
        }
        Only::parse_from(["epp"]).args
    }
}

impl LimitArgs {
    /// `--idle-stream-timeout` (`None`: off).
    pub fn idle_stream_timeout(&self) -> Option<Duration> {
        Some(self.idle_stream_timeout).filter(|d| !d.is_zero())
    }

    /// The runtime limits.
    pub fn limits(&self) -> Limits {
        let nonzero = |d: Duration| Some(d).filter(|d| !d.is_zero());
        let listener = |max_connections: usize| ListenerLimits {
            max_connections: max_connections.max(1),
            handshake_timeout: self.http2_handshake_timeout,
            idle_timeout: self.idle_connection_timeout,
        };
        Limits {
            ext_proc: listener(self.max_connections),
            admin: listener(self.max_admin_connections),
            http2_keepalive_interval: nonzero(self.http2_keepalive_interval),
            http2_keepalive_timeout: self.http2_keepalive_timeout,
            tcp_keepalive: nonzero(self.tcp_keepalive),
            max_concurrent_streams: Some(self.max_concurrent_streams).filter(|n| *n > 0),
            metrics_staleness_threshold: self.metrics_staleness_threshold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_what_the_docs_say() {
        let l = Limits::default();
        assert_eq!(l.metrics_staleness_threshold, Duration::from_secs(2));
        assert_eq!(l.ext_proc.max_connections, 1024);
        assert_eq!(l.ext_proc.handshake_timeout, Duration::from_secs(10));
        assert_eq!(l.ext_proc.idle_timeout, Duration::from_secs(300));
        assert_eq!(l.admin.max_connections, 64);
        assert_eq!(l.http2_keepalive_interval, Some(Duration::from_secs(30)));
        assert_eq!(l.max_concurrent_streams, Some(1024));
        let args = LimitArgs::default();
        assert_eq!(args.idle_stream_timeout(), Some(Duration::from_secs(300)));
        assert_eq!(LimitArgs { idle_stream_timeout: Duration::ZERO, ..args }.idle_stream_timeout(), None);
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_go_duration("soon").is_err());
    }
}
