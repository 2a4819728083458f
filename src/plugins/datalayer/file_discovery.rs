//! `file-discovery` (llm-d): endpoints come from a YAML (or JSON) file instead of Kubernetes.
//!
//! Parameters: `path` (required), `watchFile` (default `false`: read once at startup; `true`:
//! re-read on change, checked every `--endpoints-file-poll-interval`). The file format is the
//! `--endpoints-file` format (`endpoints::discovery`), which also accepts llm-d's spelling
//! (`port: "8000"`, `namespace`, `metricsHost`). The app loads it exactly as it loads the
//! flag's file; a file that cannot be read or parsed at startup fails the start.
//!
//! With both `--endpoints-file` and `file-discovery`: the same file is fine (the flag's
//! always-on reload applies); two different files are a startup error, since one endpoint
//! list cannot come from two places.

use std::path::PathBuf;

use serde::Deserialize;

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::PluginInstance;

/// Registered type name.
pub const TYPE: &str = "file-discovery";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// The endpoints file (required).
    pub path: PathBuf,
    /// Reload the file when it changes.
    pub watch_file: bool,
}

/// Decodes and checks the parameters (shared by the factory and the loader).
pub fn params(spec: &PluginSpec) -> Result<Params, BuildError> {
    let p: Params = decode_params(spec)?;
    if p.path.as_os_str().is_empty() {
        return Err(BuildError::new(format!("{}.parameters.path", spec.path), "is required"));
    }
    Ok(p)
}

/// Factory: a data-layer plugin the scheduler does not call; the app reads its parameters.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).passive())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(parameters: serde_json::Value) -> PluginSpec {
        PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters, path: "plugins[0]".into() }
    }

    #[test]
    fn path_is_required_and_watch_defaults_off() {
        assert_eq!(
            params(&spec(json!({"path": "/etc/eps.yaml"}))).unwrap(),
            Params { path: "/etc/eps.yaml".into(), watch_file: false }
        );
        assert!(params(&spec(json!({"path": "e.yaml", "watchFile": true}))).unwrap().watch_file);
        assert_eq!(params(&spec(serde_json::Value::Null)).unwrap_err().path, "plugins[0].parameters.path");
        assert_eq!(params(&spec(json!({"path": "e", "watch": true}))).unwrap_err().path, "plugins[0].parameters");
        assert!(build(&spec(json!({"path": "e"})), &BuildContext::default()).unwrap().passive);
    }
}
