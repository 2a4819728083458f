//! Supervision of the KV-event receive tasks.
//!
//! Each receive task (the central socket's, one per endpoint in pod-discovery
//! mode) runs as a spawned incarnation under [`supervise`]: when it panics,
//! returns an error, or ends before cancellation, the supervisor counts it in
//! `epp_kv_receiver_restarts_total{task, cause}`, holds
//! `epp_kv_receivers_down` up while it waits, and starts a new incarnation
//! after an exponential backoff. [`Active`] keeps `epp_kv_active_subscribers`
//! truthful: it counts a receiver only while an incarnation holds it, and its
//! `Drop` runs on panic too.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kvcache::metrics::KvCacheMetrics;

/// Why an incarnation stopped.
pub type Stopped = Result<(), String>;

/// One unit of `epp_kv_active_subscribers`, released on drop (also while unwinding a panic).
#[derive(Debug)]
pub struct Active(IntGauge);

impl Active {
    /// Counts one more active receiver.
    pub fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Active(gauge.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Restart delays: `initial`, doubled per consecutive failure up to `max`; an incarnation that
/// lived longer than `max` resets it.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Cap.
    pub max: Duration,
}

/// Runs `incarnation(n)` (n = 0, 1, ...) as spawned tasks until `cancel`, restarting each one that
/// stops by itself. An incarnation must end soon after `cancel` fires.
pub async fn supervise<F, Fut>(
    task: &'static str,
    metrics: Arc<KvCacheMetrics>,
    cancel: CancellationToken,
    backoff: Backoff,
    mut incarnation: F,
) where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Stopped> + Send + 'static,
{
    let mut delay = backoff.initial;
    let mut n = 0u32;
    loop {
        let started = Instant::now();
        let joined = tokio::spawn(incarnation(n)).await;
        if cancel.is_cancelled() {
            return;
        }
        let cause = match &joined {
            Ok(Ok(())) => "exit",
            Ok(Err(_)) => "error",
            Err(e) if e.is_panic() => "panic",
            Err(_) => "cancelled",
        };
        let detail = match joined {
            Ok(Err(e)) => e,
            Err(e) => e.to_string(),
            Ok(Ok(())) => String::new(),
        };
        tracing::error!(task, cause, error = %detail, "KV event receive task stopped; restarting");
        metrics.receiver_restarts.with_label_values(&[task, cause]).inc();
        if started.elapsed() > backoff.max {
            delay = backoff.initial;
        }
        metrics.receivers_down.inc();
        let stop = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tokio::time::sleep(delay) => false,
        };
        metrics.receivers_down.dec();
        if stop {
            return;
        }
        delay = (delay * 2).min(backoff.max);
        n = n.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn panics_and_errors_restart_and_are_counted() {
        let metrics = Arc::new(KvCacheMetrics::register(&prometheus::Registry::new()).expect("metrics"));
        let cancel = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1) };
        let (m, c, r) = (metrics.clone(), cancel.clone(), runs.clone());
        let supervisor = tokio::spawn(supervise("central", m.clone(), c.clone(), backoff, move |n| {
            let (m, c, r) = (m.clone(), c.clone(), r.clone());
            async move {
                let _active = Active::new(&m.active_subscribers);
                r.fetch_add(1, Ordering::SeqCst);
                match n {
                    0 => panic!("decoder bug"),
                    1 => Err("socket closed".to_owned()),
                    _ => {
                        c.cancelled().await;
                        Ok(())
                    }
                }
            }
        }));
        while runs.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let restarts = |cause| metrics.receiver_restarts.with_label_values(&["central", cause]).get();
        assert_eq!((restarts("panic"), restarts("error")), (1, 1));
        assert_eq!(metrics.active_subscribers.get(), 1, "the panicked incarnation released its unit");
        assert_eq!(metrics.receivers_down.get(), 0);
        cancel.cancel();
        supervisor.await.expect("supervisor");
        assert_eq!(metrics.active_subscribers.get(), 0);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }
}
