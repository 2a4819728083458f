//! Flow Control's extension points: the stateful fairness policy a `fairnessPolicyRef` names
//! and the saturation detector that gates dispatch. Plugins implement them; the queue and the
//! controller call them. Kept here so Flow Control depends on no plugin module.

use std::fmt;

use crate::endpoints::model::Candidate;

/// One non-empty flow of a Flow Control priority band, as a fairness policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct FlowView<'a> {
    /// Fairness id of the flow (for `program-aware-fairness`: the program).
    pub id: &'a str,
    /// Requests queued in the flow (at least 1).
    pub len: usize,
    /// When the flow's head request (the next one its ordering policy releases) was queued.
    pub head_enqueued: tokio::time::Instant,
}

/// A stateful Flow Control fairness policy (the built-in stateless ones live in
/// `flowcontrol::settings::Fairness`). Called with the queue lock held: keep it short.
pub trait FairnessPolicy: Send + Sync + fmt::Debug {
    /// Index into `flows` (non-empty, sorted by id) of the flow to serve next.
    fn pick(&self, flows: &[FlowView<'_>], now: tokio::time::Instant) -> usize;
    /// A request of flow `id` left the queue for dispatch after waiting `waited`.
    fn dispatched(&self, _id: &str, _waited: std::time::Duration) {}
}

/// Estimates how saturated a candidate set is (>= 1.0 = saturated); used to shed
/// sheddable (negative-priority) requests.
pub trait SaturationDetector: Send + Sync + fmt::Debug {
    /// Saturation of `candidates` at `now`.
    fn saturation(&self, candidates: &[Candidate], now: tokio::time::Instant) -> f64;
}
