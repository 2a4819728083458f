//! Admitters (GIE/llm-d `Admitter` extension point): asked after the data producers and
//! before scheduling whether a request may proceed; a denial ends the request with
//! `500 request cannot be admitted: <reason>`. Both built-ins only ever deny sheddable
//! requests (priority < 0).
//!
//! - `latency_slo`: `latency-slo-admitter`, denies when no endpoint can meet the request's
//!   latency SLO according to the latency predictor.
//! - `probabilistic`: `probabilistic-admitter`, denies with a probability that grows steeply
//!   with the pool's queue / KV-cache saturation.

pub mod latency_slo;
pub mod probabilistic;
