//! Series of the Redis-backed index (`epp_kv_redis_*`): lookups and write batches by outcome,
//! and their round-trip latency. Registered with the other `epp_kv_*` series.

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts, Registry};

/// Outcome label of one lookup or write batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered.
    Ok,
    /// The deadline passed first (the request was routed without prefix scores).
    Timeout,
    /// Not connected, connection lost or a command failed.
    Error,
}

impl Outcome {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// Handles of the Redis index series.
#[derive(Debug, Clone)]
pub struct RedisIndexMetrics {
    /// `epp_kv_redis_lookups_total{outcome}`.
    pub lookups: IntCounterVec,
    /// `epp_kv_redis_writes_total{outcome}`: event batches written (one pipeline each).
    pub writes: IntCounterVec,
    /// `epp_kv_redis_lookup_duration_seconds`: one pipelined lookup, successful or not.
    pub lookup_latency: Histogram,
    /// `epp_kv_redis_write_duration_seconds`: one event batch (reads and writes).
    pub write_latency: Histogram,
}

impl RedisIndexMetrics {
    /// Creates and registers the series.
    pub fn register(r: &Registry) -> Result<Self, prometheus::Error> {
        let counter_vec = |n: &str, h: &str| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(Opts::new(n, h), &["outcome"])?;
            r.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let histogram = |n: &str, h: &str| -> Result<Histogram, prometheus::Error> {
            let c = Histogram::with_opts(
                HistogramOpts::new(n, h).buckets(prometheus::exponential_buckets(25e-6, 2.0, 16)?),
            )?;
            r.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Self {
            lookups: counter_vec("epp_kv_redis_lookups_total", "Redis index lookups by outcome (ok, timeout, error)")?,
            writes: counter_vec("epp_kv_redis_writes_total", "KV event batches written to Redis by outcome")?,
            lookup_latency: histogram("epp_kv_redis_lookup_duration_seconds", "Redis index lookup round trip")?,
            write_latency: histogram("epp_kv_redis_write_duration_seconds", "Redis index write of one event batch")?,
        })
    }

    /// Counts one lookup.
    pub fn record_lookup(&self, outcome: Outcome, seconds: f64) {
        self.lookups.with_label_values(&[outcome.as_str()]).inc();
        self.lookup_latency.observe(seconds);
    }

    /// Counts one write batch.
    pub fn record_write(&self, outcome: Outcome, seconds: f64) {
        self.writes.with_label_values(&[outcome.as_str()]).inc();
        self.write_latency.observe(seconds);
    }
}
