//! Scheduling: profiles (`profile`), the immutable pipeline (`scheduler`), its metrics, the
//! one asynchronous stage before a decision (`stage`) and the swap point that shares the
//! current scheduler (`handle`). The pipeline is pure and synchronous: no I/O and no `.await`
//! outside `stage`. The per-request context, data and result types it works on live in
//! `framework`.

pub mod handle;
pub mod metrics;
pub mod profile;
pub mod scheduler;
pub mod stage;
