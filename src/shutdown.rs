//! Graceful shutdown on SIGTERM, bounded in time whatever the peers do.
//!
//! Timeline from the signal (t = 0):
//! 1. readiness names turn NOT_SERVING at once (liveness stays SERVING), so Kubernetes takes
//!    the pod out of the Service and gateways stop picking it;
//! 2. during the grace (`--drain-grace`, default 5 s, at most `--drain-timeout`) new
//!    connections and streams are still accepted: gateways keep sending while the endpoint
//!    change propagates (llm-d's chart sleeps 5 s in preStop for the same reason);
//! 3. then the ext_proc server stops accepting and sends GOAWAY; open streams run to their
//!    end, and the drain is over as soon as none is open (idle or silent connections are not
//!    waited for);
//! 4. at `--drain-timeout` (default 30 s) streams still open are cut, counted in
//!    `epp_drain_cut_streams_total` and logged, and the process exits 0.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, Registry};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::extproc::streams::StreamTracker;
use crate::health::HealthState;

/// Longest wait for background tasks after the drain (they stop promptly once cancelled).
pub const TASKS_BOUND: Duration = Duration::from_secs(1);

/// Grace and deadline of a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainPlan {
    /// New streams are still accepted this long.
    pub grace: Duration,
    /// The drain ends at the latest this long after it began.
    pub timeout: Duration,
}

/// What a drain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Streams still open at the deadline.
    pub cut_streams: usize,
    /// Time from the start of the drain to its end.
    pub elapsed: Duration,
}

/// Drain counters.
#[derive(Clone, Debug)]
pub struct DrainMetrics {
    /// `epp_drain_cut_streams_total`.
    pub cut_streams: IntCounter,
}

impl DrainMetrics {
    /// Registers the drain counters.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let cut_streams = IntCounter::new(
            "epp_drain_cut_streams_total",
            "ext_proc streams still open when the shutdown deadline (--drain-timeout) cut them.",
        )?;
        registry.register(Box::new(cut_streams.clone()))?;
        Ok(Self { cut_streams })
    }
}

/// Runs the drain timeline (module doc) over the ext_proc server task `ext_proc`, which
/// `serving` stops gracefully.
pub async fn drain(
    plan: DrainPlan,
    health: &HealthState,
    streams: &Arc<StreamTracker>,
    metrics: &DrainMetrics,
    serving: &CancellationToken,
    ext_proc: Option<JoinHandle<()>>,
) -> DrainReport {
    let start = Instant::now();
    let deadline = start + plan.timeout;
    health.start_draining();
    info!(grace = ?plan.grace, timeout = ?plan.timeout, open_streams = streams.open_streams(),
        "Draining: readiness NOT_SERVING; new streams accepted during the grace period");
    tokio::time::sleep_until((start + plan.grace).min(deadline)).await;
    serving.cancel();
    info!(open_streams = streams.open_streams(), "Grace over: no new connections; waiting for open streams to end");
    let mut open = streams.subscribe();
    let server_done = async {
        match ext_proc {
            Some(task) => {
                let _ = task.await;
            }
            None => std::future::pending().await,
        }
    };
    let finished = tokio::select! {
        _ = server_done => true,
        _ = open.wait_for(|n| *n == 0) => true,
        _ = tokio::time::sleep_until(deadline) => false,
    };
    let cut_streams = if finished { 0 } else { streams.open_streams() };
    let elapsed = start.elapsed();
    if cut_streams > 0 {
        metrics.cut_streams.inc_by(cut_streams as u64);
        warn!(cut_streams, elapsed = ?elapsed, "Drain deadline reached; cutting the streams still open");
    } else {
        info!(elapsed = ?elapsed, "Drained");
    }
    DrainReport { cut_streams, elapsed }
}
