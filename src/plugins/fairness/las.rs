//! Least Attained Service (LAS), the scoring strategy of `program-aware-fairness`: per program
//! (fairness id) the weighted tokens it consumed (`prompt + 2 x completion`), decayed in wall
//! clock time, and the queue waits of its requests. Among the non-empty flows of a band, the
//! one with the highest `weightService x (1 - norm(service)) + weightHeadWait x
//! norm(headWait)` is served next, where `norm` is min-max normalisation over those flows
//! (0.5 when all are equal). Pure data and arithmetic: the caller supplies the time.

use std::time::Duration;

use tokio::time::Instant;

/// Output tokens cost twice as much as prompt tokens.
pub const OUTPUT_TOKEN_WEIGHT: f64 = 2.0;

/// How attained service fades.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decay {
    /// Halves every this many seconds (> 0).
    HalfLife(f64),
    /// Multiplied by this factor per second (in (0, 1]).
    PerSecond(f64),
}

impl Decay {
    /// The multiplier after `elapsed`.
    pub fn factor(self, elapsed: Duration) -> f64 {
        let s = elapsed.as_secs_f64();
        match self {
            Self::HalfLife(h) => 0.5f64.powf(s / h),
            Self::PerSecond(f) => f.powf(s),
        }
    }
}

/// One program's accounting.
#[derive(Clone, Debug)]
pub struct Program {
    /// Attained service (weighted tokens) as of `anchor`.
    service: f64,
    /// When `service` was last decayed.
    anchor: Instant,
    /// Sum of queue waits, ms.
    wait_sum_ms: f64,
    /// Requests whose queue wait was recorded.
    pub waits: u64,
    /// Requests scheduled and not yet completed.
    pub in_flight: u64,
    /// Requests scheduled in total.
    pub dispatched: u64,
    /// Last completion (creation time until the first one), for eviction.
    pub last_completion: Instant,
}

impl Program {
    /// A program first seen at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            service: 0.0,
            anchor: now,
            wait_sum_ms: 0.0,
            waits: 0,
            in_flight: 0,
            dispatched: 0,
            last_completion: now,
        }
    }

    /// Attained service at `now` (decay applied and remembered).
    pub fn service(&mut self, now: Instant, decay: Decay) -> f64 {
        let elapsed = now.saturating_duration_since(self.anchor);
        if !elapsed.is_zero() {
            self.service *= decay.factor(elapsed);
            self.anchor = now;
        }
        self.service
    }

    /// Adds the cost of a completed request; returns the new attained service.
    pub fn add_service(&mut self, now: Instant, decay: Decay, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        let cost = prompt_tokens as f64 + OUTPUT_TOKEN_WEIGHT * completion_tokens as f64;
        self.service(now, decay) + cost
    }

    /// Stores the result of `add_service` (split so the caller can decide under one borrow).
    pub fn set_service(&mut self, service: f64) {
        self.service = service;
    }

    /// Records one request's queue wait.
    pub fn record_wait(&mut self, waited: Duration) {
        self.wait_sum_ms += waited.as_secs_f64() * 1000.0;
        self.waits += 1;
    }

    /// Mean queue wait, ms (0 before any).
    pub fn average_wait_ms(&self) -> f64 {
        if self.waits == 0 { 0.0 } else { self.wait_sum_ms / self.waits as f64 }
    }
}

/// `(v - min) / (max - min)`, 0.5 when there is no spread.
fn normalize(v: f64, min: f64, max: f64) -> f64 {
    if max > min { (v - min) / (max - min) } else { 0.5 }
}

/// Index of the best candidate among `(service, head wait ms)` pairs (first on ties), or
/// `None` for an empty slice.
pub fn pick(candidates: &[(f64, f64)], weight_service: f64, weight_head_wait: f64) -> Option<usize> {
    let (mut s_min, mut s_max, mut w_min, mut w_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(s, w) in candidates {
        (s_min, s_max, w_min, w_max) = (s_min.min(s), s_max.max(s), w_min.min(w), w_max.max(w));
    }
    let score = |&(s, w): &(f64, f64)| {
        weight_service * (1.0 - normalize(s, s_min, s_max)) + weight_head_wait * normalize(w, w_min, w_max)
    };
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let sc = score(c);
        if best.is_none_or(|(_, b)| sc > b) {
            best = Some((i, sc));
        }
    }
    best.map(|(i, _)| i)
}

/// Jain's fairness index of `values` (1.0 = all equal; 1.0 for fewer than two).
pub fn jain(values: impl IntoIterator<Item = f64>) -> f64 {
    let (mut sum, mut sum_sq, mut n) = (0.0, 0.0, 0.0);
    for v in values {
        sum += v;
        sum_sq += v * v;
        n += 1.0;
    }
    if n <= 1.0 || sum_sq == 0.0 { 1.0 } else { sum * sum / (n * sum_sq) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_halves_per_half_life_or_follows_the_per_second_factor() {
        assert!((Decay::HalfLife(60.0).factor(Duration::from_secs(120)) - 0.25).abs() < 1e-12);
        assert!((Decay::PerSecond(0.5).factor(Duration::from_secs(3)) - 0.125).abs() < 1e-12);
        assert_eq!(Decay::PerSecond(1.0).factor(Duration::from_secs(1000)), 1.0);
        let t0 = Instant::now();
        let mut p = Program::new(t0);
        let s = p.add_service(t0, Decay::HalfLife(10.0), 100, 50);
        p.set_service(s);
        assert_eq!(p.service(t0, Decay::HalfLife(10.0)), 200.0, "prompt + 2 x completion");
        assert!((p.service(t0 + Duration::from_secs(10), Decay::HalfLife(10.0)) - 100.0).abs() < 1e-9);
        assert!((p.service(t0 + Duration::from_secs(20), Decay::HalfLife(10.0)) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn least_served_wins_and_head_wait_breaks_ties() {
        // Service dominates: b served less wins although a waited longer.
        assert_eq!(pick(&[(1000.0, 50.0), (10.0, 0.0)], 0.8, 0.2), Some(1));
        // Equal service: the longer head wait wins.
        assert_eq!(pick(&[(0.0, 5.0), (0.0, 9.0), (0.0, 1.0)], 0.8, 0.2), Some(1));
        // Everything equal: the first.
        assert_eq!(pick(&[(3.0, 3.0), (3.0, 3.0)], 0.8, 0.2), Some(0));
        assert_eq!(pick(&[], 0.8, 0.2), None);
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain([5.0, 5.0, 5.0]), 1.0);
        assert_eq!(jain([7.0]), 1.0);
        assert!((jain([1.0, 0.0]) - 0.5).abs() < 1e-12);
        let mut p = Program::new(Instant::now());
        p.record_wait(Duration::from_millis(10));
        p.record_wait(Duration::from_millis(30));
        assert_eq!(p.average_wait_ms(), 20.0);
    }
}
