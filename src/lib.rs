//! epp: an Endpoint Picker for LLM inference.
pub mod kvcache;
pub mod proto;
