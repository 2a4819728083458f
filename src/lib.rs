//! epp: an Endpoint Picker for LLM inference.
pub mod endpoints;
pub mod proto;
pub mod request;
