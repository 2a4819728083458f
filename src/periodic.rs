//! A cancellable periodic tick for the background loops (scrapers, pollers, gauge refreshes,
//! heartbeats, expiry, heap trims): ticks at a fixed period, delaying (not bursting) after a
//! slow iteration. A leaf module: every layer may use it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Fixed-period ticks until cancelled.
#[derive(Debug)]
pub struct Periodic {
    ticker: tokio::time::Interval,
}

impl Periodic {
    /// Ticks every `period`; the first tick is immediate.
    pub fn new(period: Duration) -> Self {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticker }
    }

    /// Waits for the next tick; `false` once `cancel` fired.
    pub async fn tick(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = self.ticker.tick() => true,
        }
    }
}
