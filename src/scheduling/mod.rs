//! Scheduling: the per-request context and data (`context`, `data`), profiles (`profile`),
//! results (`result`), the immutable pipeline (`scheduler`) and its metrics. Pure and
//! synchronous: no I/O and no `.await` anywhere below this module.

pub mod context;
pub mod data;
pub mod metrics;
pub mod profile;
pub mod result;
pub mod scheduler;

/// Why a request could not be scheduled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// No endpoint was a candidate (empty pool, or the subset hint matched nothing).
    #[error("failed to find endpoint candidates for serving the request")]
    NoCandidates,
    /// Every candidate was filtered out in a profile.
    #[error("failed to find target endpoint: profile {profile}: filter {filter} left no endpoint")]
    AllFiltered {
        /// Profile name.
        profile: String,
        /// The filter that emptied the set.
        filter: String,
    },
    /// The handler found no usable profile result.
    #[error("failed to find target endpoint: {reason}")]
    NoResult {
        /// Why.
        reason: String,
    },
    /// The handler picked no profile at all.
    #[error("failed to find target endpoint: no scheduling profile was run")]
    NoProfileRan,
    /// A sheddable request arrived while the pool is saturated.
    #[error("system saturated, sheddable request dropped")]
    Saturated,
    /// An admitter denied the request (GIE/llm-d: `Internal`, HTTP 500).
    #[error("request cannot be admitted: {reason}")]
    NotAdmitted {
        /// The admitter's reason.
        reason: String,
    },
}
