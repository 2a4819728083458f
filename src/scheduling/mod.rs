//! Scheduling: profiles (`profile`), the immutable pipeline (`scheduler`) and its metrics. Pure
//! and synchronous: no I/O and no `.await` anywhere below this module. The per-request context,
//! data and result types it works on live in `framework`.

pub mod metrics;
pub mod profile;
pub mod scheduler;
pub mod stage;

// The per-request types moved to `framework`; re-exported so `scheduling::context`-style paths
// keep working.
pub use crate::framework::{ScheduleError, context, data, result};
