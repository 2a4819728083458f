//! `epp bench decision`: times full in-process decisions (parse the body, run the default
//! pipeline: estimate tokens, approximate prefix producer, queue/KV/prefix scorers,
//! max-score picker, pre-request index update) over synthetic endpoints with load.

use std::time::Instant;

use serde::Serialize;

use super::{percentile, synthetic};
use epp::extproc::decide::decide;
use epp::request::headers::RequestHeaders;

/// Result line.
#[derive(Debug, Serialize)]
pub struct DecisionReport {
    /// Body size.
    pub body_bytes: usize,
    /// Endpoints.
    pub endpoints: usize,
    /// Decisions timed.
    pub iterations: usize,
    /// Median latency.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Decisions per second on one thread.
    pub decisions_per_s: f64,
}

/// Runs the benchmark on the current thread.
pub fn run(body_bytes: usize, endpoints: usize, iterations: usize) -> anyhow::Result<DecisionReport> {
    let (store, loaded) = synthetic::default_pipeline(endpoints)?;
    let headers = RequestHeaders { all: vec![(":path".into(), "/v1/chat/completions".into())] };
    let metadata = Default::default();
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| synthetic::chat_body(body_bytes, i % 8, i)).collect();
    let mut samples = Vec::with_capacity(iterations);
    let wall = Instant::now();
    for i in 0..iterations {
        let body = &bodies[i % bodies.len()];
        let start = Instant::now();
        let outcome = decide(&loaded.scheduler, &store, &headers, &metadata, body, true);
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(outcome.is_ok(), "decision failed: {:?}", outcome.err());
    }
    let elapsed = wall.elapsed().as_secs_f64();
    samples.sort_by(f64::total_cmp);
    Ok(DecisionReport {
        body_bytes,
        endpoints,
        iterations,
        p50_us: percentile(&samples, 50.0),
        p99_us: percentile(&samples, 99.0),
        p999_us: percentile(&samples, 99.9),
        decisions_per_s: iterations as f64 / elapsed,
    })
}
