//! Prometheus series of the KV-event path and the prefix index.
//!
//! One [`KvCacheMetrics`] is registered on the process registry by the
//! integrator and shared as `Arc`; there are no global statics. Names use the
//! `epp_kv_` prefix. Per-endpoint series (`endpoint` label) are removed with
//! [`KvCacheMetrics::forget_endpoint`] when an endpoint leaves;
//! `epp_kv_index_endpoint_blocks{endpoint}` is read from the live indexes at each scrape
//! ([`EndpointBlocks`]), so it lists exactly the endpoints an index knows.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::events::EventKind;
use super::index::{ApplyStats, EndpointMatch, EventOutcome, PrefixIndex};

/// Handles of every KV-cache series.
#[derive(Debug, Clone)]
pub struct KvCacheMetrics {
    /// `epp_kv_events_total{kind, outcome}`.
    pub events: IntCounterVec,
    /// `epp_kv_blocks_total{op}` (op = stored | removed): engine blocks applied.
    pub blocks: IntCounterVec,
    /// `epp_kv_messages_received_total`: ZMQ messages read from sockets.
    pub messages_received: IntCounter,
    /// `epp_kv_malformed_messages_total`: wrong frame count or short seq frame.
    pub malformed_messages: IntCounter,
    /// `epp_kv_decode_errors_total`.
    pub decode_errors: IntCounter,
    /// `epp_kv_dropped_messages_total{reason}` (queue_full, unknown_endpoint, topic_filter).
    pub dropped: IntCounterVec,
    /// `epp_kv_sequence_gaps_total`.
    pub gaps: IntCounter,
    /// `epp_kv_restarts_total`: seq went backwards.
    pub restarts: IntCounter,
    /// `epp_kv_replays_total{outcome}` (complete, incomplete, failed).
    pub replays: IntCounterVec,
    /// `epp_kv_endpoint_clears_total{reason}` (all_blocks_cleared, restart, gap, removed).
    pub clears: IntCounterVec,
    /// `epp_kv_zmq_errors_total{operation}` (bind, connect, handshake, recv, replay).
    pub zmq_errors: IntCounterVec,
    /// `epp_kv_peer_events_total{event}` (connected, reconnected, disconnected): publisher
    /// connections seen by the SUB sockets (the `zeromq` crate reconnects by itself).
    pub peer_events: IntCounterVec,
    /// `epp_kv_active_subscribers`: SUB sockets with a running receive task (bound, or
    /// connected at least once); a task that stopped or panicked no longer counts.
    pub active_subscribers: IntGauge,
    /// `epp_kv_rejected_frames_total{reason}` (frame_too_large, message_too_large,
    /// too_many_frames): publisher connections dropped for crossing a wire limit.
    pub rejected_frames: IntCounterVec,
    /// `epp_kv_connections_rejected_total{reason}` (limit): connections the central socket
    /// closed on accept because it already held `maxConnections`.
    pub connections_rejected: IntCounterVec,
    /// `epp_kv_receiver_restarts_total{task, cause}` (task = central | pod; cause = panic |
    /// error | exit): receive tasks restarted by their supervisor.
    pub receiver_restarts: IntCounterVec,
    /// `epp_kv_receivers_down`: receive tasks that failed and wait for their restart.
    pub receivers_down: IntGauge,
    /// `epp_kv_index_entries`: (block, endpoint, tier) entries.
    pub index_entries: IntGauge,
    /// `epp_kv_index_bytes`: approximate index heap bytes.
    pub index_bytes: IntGauge,
    /// `epp_kv_index_evictions`: keys evicted for capacity since start.
    pub index_evictions: IntGauge,
    /// `epp_kv_index_ambiguous_refs`: engine-map key references that matched
    /// several keys of one source since start (request-key mode).
    pub index_ambiguous_refs: IntGauge,
    /// `epp_kv_lookup_duration_seconds`.
    pub lookup_latency: Histogram,
    /// `epp_kv_lookup_blocks_total`: blocks asked for in lookups.
    pub lookup_blocks: IntCounter,
    /// `epp_kv_lookup_hit_blocks_total`: longest match of the best endpoint.
    pub lookup_hit_blocks: IntCounter,
    /// `epp_kv_prefix_hit_ratio`: best match / blocks per lookup.
    pub prefix_hit_ratio: Histogram,
    /// `epp_kv_drift_checks_total{endpoint}`.
    pub drift_checks: IntCounterVec,
    /// `epp_kv_drift_mismatches_total{endpoint, cause}`.
    pub drift_mismatches: IntCounterVec,
    /// `epp_kv_endpoint_block_size{endpoint}`: block size the endpoint publishes.
    pub endpoint_block_size: IntGaugeVec,
    /// `epp_kv_apply_duration_seconds`: time to apply one batch.
    pub apply_latency: Histogram,
    /// `epp_kv_speculative_blocks_total{op}` (op = added | expired): `speculativeIndexing`.
    pub speculative_blocks: IntCounterVec,
    /// The Redis index's series (`epp_kv_redis_*`).
    pub redis: super::redis_index::metrics::RedisIndexMetrics,
    /// Drift state `/readyz` reports (shared by clones; not a Prometheus series).
    pub status: super::status::KvStatus,
    /// The SUB sockets, for `/debug/state` (shared by clones; not a Prometheus series).
    pub subscriptions: super::board::SubscriptionBoard,
    /// The live prefix indexes, read by `epp_kv_index_endpoint_blocks` and `/debug/state`.
    pub indexes: super::board::IndexBoard,
}

/// `epp_kv_index_endpoint_blocks{endpoint}`: blocks each endpoint holds in the live prefix
/// indexes (any tier), counted at collection time (one pass over each index).
#[derive(Clone, Debug)]
pub struct EndpointBlocks {
    indexes: super::board::IndexBoard,
    template: IntGaugeVec,
}

impl EndpointBlocks {
    const NAME: &'static str = "epp_kv_index_endpoint_blocks";
    const HELP: &'static str = "Blocks each endpoint holds in the prefix index (any tier)";

    fn new(indexes: super::board::IndexBoard) -> Result<Self, prometheus::Error> {
        Ok(Self { indexes, template: IntGaugeVec::new(Opts::new(Self::NAME, Self::HELP), &["endpoint"])? })
    }
}

impl prometheus::core::Collector for EndpointBlocks {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.template.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Ok(gauges) = IntGaugeVec::new(Opts::new(Self::NAME, Self::HELP), &["endpoint"]) else { return Vec::new() };
        for (endpoint, blocks) in self.indexes.blocks_by_endpoint() {
            gauges.with_label_values(&[endpoint.as_str()]).set(i64::try_from(blocks).unwrap_or(i64::MAX));
        }
        prometheus::core::Collector::collect(&gauges)
    }
}

fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> Result<C, prometheus::Error> {
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

impl KvCacheMetrics {
    /// Creates and registers every series.
    pub fn register(r: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |n: &str, h: &str| reg(r, IntCounter::new(n, h)?);
        let counter_vec = |n: &str, h: &str, l: &[&str]| reg(r, IntCounterVec::new(Opts::new(n, h), l)?);
        let ratio_buckets = vec![0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0];
        let indexes = super::board::IndexBoard::default();
        reg(r, EndpointBlocks::new(indexes.clone())?)?;
        Ok(KvCacheMetrics {
            events: counter_vec("epp_kv_events_total", "KV events by kind and outcome", &["kind", "outcome"])?,
            blocks: counter_vec("epp_kv_blocks_total", "Engine blocks applied by operation", &["op"])?,
            messages_received: counter("epp_kv_messages_received_total", "ZMQ messages received")?,
            malformed_messages: counter("epp_kv_malformed_messages_total", "Messages with a bad frame layout")?,
            decode_errors: counter("epp_kv_decode_errors_total", "Payloads that failed to decode")?,
            dropped: counter_vec("epp_kv_dropped_messages_total", "Messages dropped before apply", &["reason"])?,
            gaps: counter("epp_kv_sequence_gaps_total", "Sequence gaps detected")?,
            restarts: counter("epp_kv_restarts_total", "Publisher restarts detected (seq went back)")?,
            replays: counter_vec("epp_kv_replays_total", "Replay attempts by outcome", &["outcome"])?,
            clears: counter_vec("epp_kv_endpoint_clears_total", "Endpoint purges by reason", &["reason"])?,
            zmq_errors: counter_vec("epp_kv_zmq_errors_total", "ZeroMQ errors by operation", &["operation"])?,
            peer_events: counter_vec(
                "epp_kv_peer_events_total",
                "Publisher connections by event (connected, reconnected, disconnected)",
                &["event"],
            )?,
            active_subscribers: reg(
                r,
                IntGauge::new("epp_kv_active_subscribers", "SUB sockets with a running receive task")?,
            )?,
            rejected_frames: counter_vec(
                "epp_kv_rejected_frames_total",
                "Publisher connections dropped for crossing a wire limit, by reason",
                &["reason"],
            )?,
            connections_rejected: counter_vec(
                "epp_kv_connections_rejected_total",
                "Connections the central KV-event socket closed on accept, by reason (limit: maxConnections reached)",
                &["reason"],
            )?,
            receiver_restarts: counter_vec(
                "epp_kv_receiver_restarts_total",
                "KV-event receive tasks restarted after a panic, an error or an unexpected exit",
                &["task", "cause"],
            )?,
            receivers_down: reg(
                r,
                IntGauge::new("epp_kv_receivers_down", "KV-event receive tasks waiting for a restart")?,
            )?,
            index_entries: reg(r, IntGauge::new("epp_kv_index_entries", "(block, endpoint, tier) entries")?)?,
            index_bytes: reg(r, IntGauge::new("epp_kv_index_bytes", "Approximate index heap bytes")?)?,
            index_evictions: reg(r, IntGauge::new("epp_kv_index_evictions", "Keys evicted for capacity")?)?,
            index_ambiguous_refs: reg(
                r,
                IntGauge::new(
                    "epp_kv_index_ambiguous_refs",
                    "Engine-map key references that matched several keys held by one source (all released)",
                )?,
            )?,
            lookup_latency: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new("epp_kv_lookup_duration_seconds", "Prefix lookup latency")
                        .buckets(prometheus::exponential_buckets(1e-6, 2.0, 16)?),
                )?,
            )?,
            lookup_blocks: counter("epp_kv_lookup_blocks_total", "Blocks asked for in lookups")?,
            lookup_hit_blocks: counter("epp_kv_lookup_hit_blocks_total", "Blocks matched by the best endpoint")?,
            prefix_hit_ratio: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new("epp_kv_prefix_hit_ratio", "Best prefix match / blocks").buckets(ratio_buckets),
                )?,
            )?,
            drift_checks: counter_vec("epp_kv_drift_checks_total", "Block hashes verified", &["endpoint"])?,
            drift_mismatches: counter_vec(
                "epp_kv_drift_mismatches_total",
                "Hash mismatches by likely cause",
                &["endpoint", "cause"],
            )?,
            endpoint_block_size: reg(
                r,
                IntGaugeVec::new(
                    Opts::new("epp_kv_endpoint_block_size", "Block size the endpoint publishes"),
                    &["endpoint"],
                )?,
            )?,
            apply_latency: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new("epp_kv_apply_duration_seconds", "Time to apply one batch")
                        .buckets(prometheus::exponential_buckets(1e-6, 4.0, 10)?),
                )?,
            )?,
            speculative_blocks: counter_vec(
                "epp_kv_speculative_blocks_total",
                "Speculative blocks added for routed requests and expired",
                &["op"],
            )?,
            redis: super::redis_index::metrics::RedisIndexMetrics::register(r)?,
            status: super::status::KvStatus::default(),
            subscriptions: super::board::SubscriptionBoard::default(),
            indexes,
        })
    }

    /// Counts one speculative-ledger change.
    pub fn record_speculative(&self, c: crate::kvcache::SpeculativeChange) {
        for (op, n) in [("added", c.added), ("expired", c.expired)] {
            if n > 0 {
                self.speculative_blocks.with_label_values(&[op]).inc_by(n as u64);
            }
        }
    }

    /// Adds one batch's apply counts.
    pub fn record_apply(&self, s: &ApplyStats) {
        for (k, kind) in [EventKind::Stored, EventKind::Removed, EventKind::Cleared].into_iter().enumerate() {
            for o in EventOutcome::ALL {
                let n = s.events[k][o as usize];
                if n > 0 {
                    self.events.with_label_values(&[kind.as_str(), o.as_str()]).inc_by(u64::from(n));
                }
            }
        }
        self.blocks.with_label_values(&["stored"]).inc_by(s.stored_blocks);
        self.blocks.with_label_values(&["removed"]).inc_by(s.removed_blocks);
    }

    /// Records one lookup of `asked` blocks whose best endpoint matched `best`.
    pub fn record_lookup(&self, seconds: f64, asked: usize, best: usize) {
        self.lookup_latency.observe(seconds);
        self.lookup_blocks.inc_by(asked as u64);
        self.lookup_hit_blocks.inc_by(best as u64);
        if asked > 0 {
            self.prefix_hit_ratio.observe(best as f64 / asked as f64);
        }
    }

    /// `index.lookup(keys)`, recording latency, blocks and hit ratio.
    pub fn timed_lookup(&self, index: &PrefixIndex, keys: &[u64]) -> Vec<EndpointMatch> {
        let t0 = std::time::Instant::now();
        let found = index.lookup(keys);
        let best = found.iter().map(|m| m.blocks).max().unwrap_or(0);
        self.record_lookup(t0.elapsed().as_secs_f64(), keys.len(), best);
        found
    }

    /// Counts a drifted block hash from `endpoint` in the counter and in `status`.
    pub fn record_drift_mismatch(&self, endpoint: &str, cause: &'static str) {
        self.drift_mismatches.with_label_values(&[endpoint, cause]).inc();
        self.status.record_drift(endpoint, cause);
    }

    /// Removes the per-endpoint series of `endpoint` (and its drift status).
    pub fn forget_endpoint(&self, endpoint: &str) {
        self.status.forget_endpoint(endpoint);
        let _ = self.drift_checks.remove_label_values(&[endpoint]);
        let _ = self.endpoint_block_size.remove_label_values(&[endpoint]);
        for cause in ["block_size", "hash_seed", "algorithm", "unknown"] {
            let _ = self.drift_mismatches.remove_label_values(&[endpoint, cause]);
        }
    }
}

/// `/readyz` detail lines about the KV-event transport, read from `registry` (empty when all is
/// well). Informational: KV events only improve routing, so their trouble never fails
/// readiness (a hostile publisher must not be able to take epp out of rotation).
pub fn readiness_details(registry: &Registry) -> Vec<String> {
    let families = registry.gather();
    let values = |name: &str| -> Vec<(String, f64)> {
        let Some(family) = families.iter().find(|f| f.name() == name) else { return Vec::new() };
        let counter = family.get_field_type() == prometheus::proto::MetricType::COUNTER;
        family
            .get_metric()
            .iter()
            .map(|m| {
                let labels: Vec<String> = m.get_label().iter().map(|l| format!("{}={}", l.name(), l.value())).collect();
                let v = if counter { m.get_counter().get_value() } else { m.get_gauge().get_value() };
                (labels.join(","), v)
            })
            .filter(|(_, v)| *v > 0.0)
            .collect()
    };
    let mut out = Vec::new();
    for (_, down) in values("epp_kv_receivers_down") {
        out.push(format!("kv-events: {down} receive task(s) down, restarting (see epp_kv_receiver_restarts_total)"));
    }
    for (labels, n) in values("epp_kv_receiver_restarts_total") {
        out.push(format!("kv-events: receive task restarted {n} time(s) ({labels})"));
    }
    for (labels, n) in values("epp_kv_rejected_frames_total") {
        out.push(format!("kv-events: {n} publisher connection(s) dropped for crossing a wire limit ({labels})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_and_records() {
        let r = Registry::new();
        let m = KvCacheMetrics::register(&r).expect("register");
        assert!(KvCacheMetrics::register(&r).is_err(), "duplicate registration is refused");
        let mut s = ApplyStats::default();
        s.events[0][0] = 2;
        s.stored_blocks = 6;
        m.record_apply(&s);
        m.record_lookup(1e-5, 8, 4);
        assert_eq!(m.events.with_label_values(&["block_stored", "applied"]).get(), 2);
        assert_eq!(m.blocks.with_label_values(&["stored"]).get(), 6);
        assert_eq!(m.lookup_hit_blocks.get(), 4);
        let idx = PrefixIndex::new(crate::kvcache::index::IndexConfig::default());
        assert!(m.timed_lookup(&idx, &[1, 2]).is_empty());
        assert_eq!(m.lookup_blocks.get(), 10);
        assert!(r.gather().iter().any(|f| f.name() == "epp_kv_prefix_hit_ratio"));
    }

    #[test]
    fn readiness_details_name_transport_trouble() {
        let r = Registry::new();
        let m = KvCacheMetrics::register(&r).expect("register");
        assert!(readiness_details(&r).is_empty());
        m.rejected_frames.with_label_values(&["frame_too_large"]).inc();
        m.receiver_restarts.with_label_values(&["central", "panic"]).inc();
        m.receivers_down.set(1);
        let d = readiness_details(&r);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].contains("1 receive task(s) down"), "{d:?}");
        assert!(d[1].contains("cause=panic,task=central"), "{d:?}");
        assert!(d[2].contains("reason=frame_too_large"), "{d:?}");
    }
}
