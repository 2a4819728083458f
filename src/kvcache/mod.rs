//! Precise prefix-cache routing from vLLM KV events.
pub mod decode;
pub mod events;
pub mod hashing;
pub mod keys;
pub mod index;
pub mod drift;
pub mod metrics;
pub mod sequence;
pub mod subscriber;
