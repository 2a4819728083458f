//! The plugin implementations, one module per kind, and the catalogue (`registry`) that names
//! them all. The contracts they implement live in `framework`; plugins depend on the
//! framework, never on the scheduler.

pub mod admitter;
pub mod attribute_reporter;
pub mod datalayer;
pub mod decider;
pub mod fairness;
pub mod filter;
pub mod load;
pub mod picker;
pub mod producer;
pub mod profile_handler;
pub mod registry;
pub mod request_parser;
pub mod scorer;
pub mod served_verifier;
