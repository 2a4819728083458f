//! Profile handlers: choose which scheduling profiles run and combine their results.
//! `disagg_headers` holds the P/D header logic shared with the deprecated header handlers.

pub mod data_parallel;
pub mod disagg;
pub mod disagg_headers;
pub mod single;
