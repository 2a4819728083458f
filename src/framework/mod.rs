//! The framework layer, below both the scheduler and the plugins: the extension-point traits
//! and `PluginInstance` (`plugin`), what factories build with (`build`), the per-request
//! context and data (`context`, `data`), the shared RNG and index handles (`handles`), the
//! result types (`result`) and the cross-replica sharing hooks (`replica`). It names no plugin
//! and no scheduler type; `plugins` and `scheduling` both depend on it, and
//! `plugins::registry` is the one module that imports every plugin.

pub mod build;
pub mod context;
pub mod data;
pub mod handles;
pub mod plugin;
pub mod replica;
pub mod result;

pub use result::ScheduleError;
