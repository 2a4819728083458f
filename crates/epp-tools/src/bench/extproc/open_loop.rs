//! Open-loop load at one fixed rate: a dispatcher thread (`bench-cli-tick`) issues request
//! `i` at `start + i / rate` whatever happened to earlier requests, each as its own task and
//! ext_proc stream on the client runtime. Latency runs from the *scheduled* send time to the
//! complete answer, so a server (or client) that falls behind shows up in the percentiles
//! instead of silently lowering the offered rate (no coordinated omission). A request due
//! while `concurrency` streams are in flight is dropped and counted.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::runtime::Handle;
use tonic::transport::Channel;

use super::args::BodyMode;
use super::transaction;
use super::workload::Workload;
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;

/// What one step needs.
pub struct Step {
    /// Offered rate, requests per second.
    pub rate: f64,
    /// Scheduling window.
    pub duration: Duration,
    /// In-flight cap.
    pub concurrency: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Body mode.
    pub mode: BodyMode,
}

/// Outcome of one step.
#[derive(Debug)]
pub struct StepResult {
    /// Requests issued (not dropped).
    pub sent: u64,
    /// Requests answered with a valid destination.
    pub ok: u64,
    /// Failures: gRPC errors, timeouts, missing or unknown destinations, short echoes.
    pub errors: u64,
    /// Requests not issued because the in-flight cap was reached.
    pub dropped: u64,
    /// Latency of successful requests, microseconds from the scheduled send time.
    pub latency_us: Histogram<u64>,
    /// From the first scheduled send to the last answer (at least the window).
    pub elapsed: Duration,
    /// First error seen, for the operator.
    pub first_error: Option<String>,
}

type Answer = (Result<Duration, String>, Instant);

/// Shared, read-only inputs of every request of a run.
#[derive(Clone)]
pub struct Requests {
    /// One channel (HTTP/2 connection) per `--connections`, used round robin.
    pub channels: Vec<Channel>,
    /// Message sequences.
    pub workload: Arc<Workload>,
    /// Valid destinations, when known.
    pub destinations: Option<Arc<HashSet<String>>>,
}

/// Runs one step on `client` (the client runtime), blocking the calling thread until every
/// issued request has finished or timed out.
pub fn run(client: &Handle, requests: &Requests, step: &Step) -> StepResult {
    let n = (step.rate * step.duration.as_secs_f64()).round().max(1.0) as u64;
    let period = Duration::from_secs_f64(1.0 / step.rate);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<Answer>();
    let start = Instant::now() + Duration::from_millis(5);
    let (sent, dropped) = std::thread::scope(|s| {
        let dispatcher = std::thread::Builder::new().name("bench-cli-tick".into()).spawn_scoped(s, || {
            let (mut sent, mut dropped) = (0u64, 0u64);
            for i in 0..n {
                let due = start + period.mul_f64(i as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                if in_flight.load(Ordering::Relaxed) >= step.concurrency {
                    dropped += 1;
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                sent += 1;
                client.spawn(one(requests.clone(), i, due, step.timeout, step.mode, tx.clone(), in_flight.clone()));
            }
            (sent, dropped)
        });
        dispatcher.map(|d| d.join().unwrap_or((0, 0))).unwrap_or((0, 0))
    });
    drop(tx);
    collect(rx, sent, dropped, start, step)
}

/// Gathers the answers of `sent` requests (bounded: each has its own timeout).
fn collect(rx: mpsc::Receiver<Answer>, sent: u64, dropped: u64, start: Instant, step: &Step) -> StepResult {
    let mut latency_us = Histogram::new_with_bounds(1, 120_000_000, 3).expect("static histogram bounds are valid");
    let (mut ok, mut errors, mut first_error) = (0u64, 0u64, None);
    let mut last = start + step.duration;
    let limit = step.timeout + Duration::from_secs(5);
    for _ in 0..sent {
        let Ok((outcome, at)) = rx.recv_timeout(limit) else {
            errors += 1;
            first_error.get_or_insert_with(|| "request task vanished".to_string());
            continue;
        };
        last = last.max(at);
        match outcome {
            Ok(latency) => {
                ok += 1;
                latency_us.saturating_record(latency.as_micros().max(1) as u64);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    StepResult { sent, ok, errors, dropped, latency_us, elapsed: last.saturating_duration_since(start), first_error }
}

/// One request: decide, report, then drain the stream off the clock.
async fn one(
    requests: Requests,
    i: u64,
    due: Instant,
    timeout: Duration,
    mode: BodyMode,
    tx: mpsc::Sender<Answer>,
    in_flight: Arc<AtomicUsize>,
) {
    let channel = requests.channels[(i % requests.channels.len() as u64) as usize].clone();
    let client = ExternalProcessorClient::new(channel).max_decoding_message_size(usize::MAX);
    let (messages, body_len) = requests.workload.messages(i);
    let decided = tokio::time::timeout(timeout, transaction::decide(client, messages, mode, body_len)).await;
    let at = Instant::now();
    let (outcome, open) = match decided {
        Err(_) => (Err(format!("no answer within {timeout:?}")), None),
        Ok(Err(e)) => (Err(e), None),
        Ok(Ok((dest, open))) => match &requests.destinations {
            Some(valid) if !valid.contains(&dest) => (Err(format!("unknown destination {dest:?}")), Some(open)),
            _ => (Ok(at.saturating_duration_since(due)), Some(open)),
        },
    };
    let _ = tx.send((outcome, at));
    if let Some(open) = open {
        let _ = tokio::time::timeout(timeout, transaction::drain(open)).await;
    }
    in_flight.fetch_sub(1, Ordering::Relaxed);
}
