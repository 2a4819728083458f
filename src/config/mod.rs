//! Configuration: the EndpointPickerConfig document (`raw`), the built-in default
//! (`defaults`), problems with paths (`error`), and the loader that validates the document,
//! instantiates plugins, injects the documented defaults and assembles the immutable
//! scheduler (`loader`, with `profiles` and `producers` for the two larger steps).

pub mod defaults;
pub mod error;
pub mod flow_control;
pub mod loader;
pub mod producers;
pub mod profiles;
pub mod raw;

pub use error::{ConfigError, ConfigErrors};
pub use loader::{LoadedConfig, Reusable, load, load_reusing};

/// Accepted `apiVersion` values.
pub const API_VERSIONS: &[&str] = &["llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"];
/// Accepted feature gates.
pub const FEATURE_GATES: &[&str] = &["dataLayer", "enableLegacyMetrics", "flowControl", "haPopulateNonLeaderDatastore"];

#[cfg(test)]
mod tests;
