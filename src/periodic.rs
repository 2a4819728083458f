//! A cancellable periodic tick for the background loops (scrapers, pollers, gauge refreshes,
//! heartbeats, expiry, heap trims): ticks at a fixed period, delaying (not bursting) after a
//! slow iteration. A leaf module: every layer may use it.
//!
//! [`Periodic::aligned`] puts loops with the same period on one of [`PHASE_SLOTS`] shared
//! phases (fixed fractions of the period, counted from a process-wide origin), so N
//! per-endpoint pollers wake the runtime at most `PHASE_SLOTS` times per period instead of N
//! times at scattered instants: on an idle service each wake-up of a parked worker thread
//! costs tens of microseconds, more than the poll itself. More than one slot keeps the burst
//! of polls that share an instant (and the decisions queued behind it) to 1/`PHASE_SLOTS` of
//! the endpoints.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Fixed-period ticks until cancelled.
#[derive(Debug)]
pub struct Periodic {
    ticker: tokio::time::Interval,
    /// An immediate tick still owed before the aligned ones ([`Periodic::aligned`]).
    first_pending: bool,
}

impl Periodic {
    /// Ticks every `period`; the first tick is immediate.
    pub fn new(period: Duration) -> Self {
        Self::starting_at(Instant::now(), period, false)
    }

    /// Ticks immediately, then at `origin + k·period + slot·period/PHASE_SLOTS` for a
    /// process-wide origin, `slot = key % PHASE_SLOTS`: loops sharing a period and a slot tick
    /// together. `key` is any stable spread value (e.g. a hash of the endpoint's name).
    pub fn aligned(period: Duration, key: u64) -> Self {
        let now = Instant::now();
        Self::aligned_from(origin(now), now, period, key)
    }

    /// [`Periodic::aligned`] against an explicit `origin`, at `now`.
    fn aligned_from(origin: Instant, now: Instant, period: Duration, key: u64) -> Self {
        let slot = u32::try_from(key % u64::from(PHASE_SLOTS)).unwrap_or(0);
        let shifted_origin = origin + period / PHASE_SLOTS * slot;
        Self::starting_at(next_boundary(now, shifted_origin, period), period, true)
    }

    fn starting_at(start: Instant, period: Duration, first_pending: bool) -> Self {
        let mut ticker = tokio::time::interval_at(start, period.max(Duration::from_nanos(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticker, first_pending }
    }

    /// Waits for the next tick; `false` once `cancel` fired.
    pub async fn tick(&mut self, cancel: &CancellationToken) -> bool {
        if std::mem::take(&mut self.first_pending) {
            return !cancel.is_cancelled();
        }
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = self.ticker.tick() => true,
        }
    }
}

/// A stable spread key for [`Periodic::aligned`] from a name (e.g. an endpoint id).
pub fn spread_key(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

/// Phases per period of [`Periodic::aligned`].
pub const PHASE_SLOTS: u32 = 16;

/// The phase origin shared by aligned tickers: the first time one was made.
fn origin(now: Instant) -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| now)
}

/// The first instant later than `now` that lies a whole number of periods from `origin`
/// (before or after it: under another runtime's paused clock the origin can lie ahead).
fn next_boundary(now: Instant, origin: Instant, period: Duration) -> Instant {
    let period_ns = period.as_nanos().max(1);
    let nanos = |ns: u128| Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
    match now.checked_duration_since(origin) {
        Some(elapsed) => now + nanos(period_ns - elapsed.as_nanos() % period_ns),
        None => match (origin - now).as_nanos() % period_ns {
            0 => now + nanos(period_ns),
            ahead => now + nanos(ahead),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_are_multiples_of_the_period_after_now() {
        let origin = Instant::now();
        let period = Duration::from_millis(50);
        for offset_ms in [0u64, 1, 49, 50, 51, 123] {
            let now = origin + Duration::from_millis(offset_ms);
            let next = next_boundary(now, origin, period);
            assert!(next > now, "offset {offset_ms}");
            assert!(next - now <= period, "offset {offset_ms}");
            assert_eq!((next - origin).as_nanos() % period.as_nanos(), 0, "offset {offset_ms}");
        }
        for before_ms in [5u64, 50, 120] {
            let now = origin - Duration::from_millis(before_ms);
            let next = next_boundary(now, origin, period);
            assert!(next > now && next - now <= period, "{before_ms} ms before the origin");
            let gap = if next >= origin { next - origin } else { origin - next };
            assert_eq!(gap.as_nanos() % period.as_nanos(), 0, "{before_ms} ms before the origin");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn aligned_tickers_started_apart_tick_together_per_slot() {
        let cancel = CancellationToken::new();
        let period = Duration::from_millis(160);
        let slot = period / PHASE_SLOTS;
        // An explicit origin: the process-wide one may come from another test's clock.
        let origin = Instant::now();
        let aligned = |key| Periodic::aligned_from(origin, Instant::now(), period, key);
        let mut a = aligned(3);
        assert!(a.tick(&cancel).await, "first tick is immediate");
        a.tick(&cancel).await;
        let boundary = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut same_slot = aligned(3 + u64::from(PHASE_SLOTS));
        let mut next_slot = aligned(4);
        assert!(same_slot.tick(&cancel).await, "first tick is immediate");
        assert!(next_slot.tick(&cancel).await, "first tick is immediate");
        next_slot.tick(&cancel).await;
        assert_eq!(Instant::now() - boundary, slot, "the next slot ticks one slot later");
        a.tick(&cancel).await;
        assert_eq!(Instant::now() - boundary, period);
        same_slot.tick(&cancel).await;
        assert_eq!(Instant::now() - boundary, period, "the same slot shares one instant");
        cancel.cancel();
        assert!(!a.tick(&cancel).await);
    }
}
