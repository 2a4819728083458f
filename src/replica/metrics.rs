//! `epp_replica_sync_*`: connection state, messages in and out, drops, lag, outages, resyncs
//! and gaps (docs/replicas.md#metrics). Every labelled series is created at registration so
//! it reads 0 before the first event.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// What became of a message read from the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Applied (or a heartbeat noted).
    Applied,
    /// Published by this replica.
    Own,
    /// Not a version-1 message, or no `m` field.
    Malformed,
    /// Another format version.
    ForeignVersion,
    /// For a plugin instance this replica does not have.
    UnknownPlugin,
    /// An in-flight or speculative update too old to mean anything now.
    Stale,
}

impl Received {
    const ALL: [Received; 6] = [
        Received::Applied,
        Received::Own,
        Received::Malformed,
        Received::ForeignVersion,
        Received::UnknownPlugin,
        Received::Stale,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Received::Applied => "applied",
            Received::Own => "own",
            Received::Malformed => "malformed",
            Received::ForeignVersion => "foreign_version",
            Received::UnknownPlugin => "unknown_plugin",
            Received::Stale => "stale",
        }
    }
}

/// The sync metric handles.
#[derive(Clone, Debug)]
pub struct SyncMetrics {
    /// `epp_replica_sync_connected`.
    pub connected: IntGauge,
    /// `epp_replica_sync_messages_sent_total`.
    pub sent: IntCounter,
    /// `epp_replica_sync_messages_dropped_total{reason="queue_full"}`.
    pub dropped_queue_full: IntCounter,
    /// `epp_replica_sync_messages_dropped_total{reason="redis_error"}`.
    pub dropped_redis_error: IntCounter,
    /// `epp_replica_sync_messages_received_total`, one series per outcome (as in `Received::ALL`).
    received: [IntCounter; 6],
    /// `epp_replica_sync_lag_seconds`.
    pub lag: Histogram,
    /// `epp_replica_sync_outages_total`.
    pub outages: IntCounter,
    /// `epp_replica_sync_resyncs_total`.
    pub resyncs: IntCounter,
    /// `epp_replica_sync_gaps_total`.
    pub gaps: IntCounter,
    /// `epp_replica_sync_peers`.
    pub peers: IntGauge,
}

impl SyncMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let connected = IntGauge::new(
            "epp_replica_sync_connected",
            "1 while replica sync has working connections to Redis (publisher and reader).",
        )?;
        let sent = IntCounter::new("epp_replica_sync_messages_sent_total", "Sync messages written to Redis.")?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "epp_replica_sync_messages_dropped_total",
                "Sync messages not sent: queue_full (the bounded queue was full) or redis_error (the write failed).",
            ),
            &["reason"],
        )?;
        let received = IntCounterVec::new(
            Opts::new(
                "epp_replica_sync_messages_received_total",
                "Sync messages read from Redis, by outcome (applied, own, malformed, foreign_version, unknown_plugin, stale).",
            ),
            &["outcome"],
        )?;
        let lag = Histogram::with_opts(
            HistogramOpts::new(
                "epp_replica_sync_lag_seconds",
                "Time from another replica publishing an update to this replica applying it (live reads).",
            )
            .buckets(vec![0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
        )?;
        let outages = IntCounter::new(
            "epp_replica_sync_outages_total",
            "Times replica sync lost Redis (connected -> disconnected).",
        )?;
        let resyncs = IntCounter::new(
            "epp_replica_sync_resyncs_total",
            "Catch-ups from the stream: at start and after every reconnect.",
        )?;
        let gaps = IntCounter::new(
            "epp_replica_sync_gaps_total",
            "Catch-ups that found the stream trimmed past the last entry applied (updates lost).",
        )?;
        let peers =
            IntGauge::new("epp_replica_sync_peers", "Other replicas heard from within three heartbeat periods.")?;
        registry.register(Box::new(connected.clone()))?;
        registry.register(Box::new(sent.clone()))?;
        registry.register(Box::new(dropped.clone()))?;
        registry.register(Box::new(received.clone()))?;
        registry.register(Box::new(lag.clone()))?;
        registry.register(Box::new(outages.clone()))?;
        registry.register(Box::new(resyncs.clone()))?;
        registry.register(Box::new(gaps.clone()))?;
        registry.register(Box::new(peers.clone()))?;
        Ok(Self {
            connected,
            sent,
            dropped_queue_full: dropped.with_label_values(&["queue_full"]),
            dropped_redis_error: dropped.with_label_values(&["redis_error"]),
            received: Received::ALL.map(|o| received.with_label_values(&[o.as_str()])),
            lag,
            outages,
            resyncs,
            gaps,
            peers,
        })
    }

    /// Counts `n` messages read with `outcome`.
    pub fn received(&self, outcome: Received, n: u64) {
        self.received[outcome as usize].inc_by(n);
    }

    /// Messages read with `outcome` so far.
    pub fn received_count(&self, outcome: Received) -> u64 {
        self.received[outcome as usize].get()
    }
}
