//! Profile handlers: choose which scheduling profiles run and combine their results.
//! `disagg_headers` holds the P/D header logic shared with the deprecated header handlers.

pub mod data_parallel;
pub mod disagg;
pub mod disagg_headers;
pub mod single;

/// Types whose instances are profile handlers (the loader uses this to tell that a missing
/// handler is explained by one that failed to build).
pub const TYPES: &[&str] = &[single::TYPE, disagg::TYPE, disagg::pd::TYPE, data_parallel::TYPE];
