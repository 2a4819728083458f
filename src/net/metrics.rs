//! Connection counters of the listeners, labelled by listener (`ext_proc`, `health`, `admin`).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::conn::CloseReason;

/// The connection metric families.
#[derive(Clone, Debug)]
pub struct ConnMetrics {
    accepted: IntCounterVec,
    rejected: IntCounterVec,
    closed: IntCounterVec,
    open: IntGaugeVec,
}

/// The counters of one listener.
#[derive(Clone, Debug)]
pub struct ListenerCounters {
    /// `epp_connections_accepted_total{listener}`.
    pub accepted: IntCounter,
    /// `epp_connections_rejected_total{listener,reason="limit"}`.
    pub rejected: IntCounter,
    /// `epp_connections_closed_total{listener,reason="handshake_timeout"}`.
    pub handshake_timeouts: IntCounter,
    /// `epp_connections_closed_total{listener,reason="idle_timeout"}`.
    pub idle_timeouts: IntCounter,
    /// `epp_connections_open{listener}`.
    pub open: IntGauge,
}

impl ListenerCounters {
    /// Counts a connection closed for `reason`.
    pub fn closed(&self, reason: CloseReason) {
        match reason {
            CloseReason::HandshakeTimeout => self.handshake_timeouts.inc(),
            CloseReason::IdleTimeout => self.idle_timeouts.inc(),
        }
    }
}

impl ConnMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let accepted = IntCounterVec::new(
            Opts::new("epp_connections_accepted_total", "Connections accepted, by listener."),
            &["listener"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "epp_connections_rejected_total",
                "Connections closed on accept because the listener held its maximum (reason=limit).",
            ),
            &["listener", "reason"],
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "epp_connections_closed_total",
                "Connections closed by a limit: handshake_timeout (no first request in time) or idle_timeout.",
            ),
            &["listener", "reason"],
        )?;
        let open =
            IntGaugeVec::new(Opts::new("epp_connections_open", "Connections open, by listener."), &["listener"])?;
        registry.register(Box::new(accepted.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        registry.register(Box::new(open.clone()))?;
        Ok(Self { accepted, rejected, closed, open })
    }

    /// The counters of `listener` (every series created, so they show as 0).
    pub fn listener(&self, listener: &str) -> ListenerCounters {
        ListenerCounters {
            accepted: self.accepted.with_label_values(&[listener]),
            rejected: self.rejected.with_label_values(&[listener, "limit"]),
            handshake_timeouts: self.closed.with_label_values(&[listener, CloseReason::HandshakeTimeout.as_str()]),
            idle_timeouts: self.closed.with_label_values(&[listener, CloseReason::IdleTimeout.as_str()]),
            open: self.open.with_label_values(&[listener]),
        }
    }
}
