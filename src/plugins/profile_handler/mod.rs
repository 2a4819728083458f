//! Profile handlers: choose which scheduling profiles run and combine their results.

pub mod single;
