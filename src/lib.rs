//! epp: an Endpoint Picker for LLM inference.
pub mod proto;
