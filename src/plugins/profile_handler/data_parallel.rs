//! `data-parallel-profile-handler` (docs-deprecated; with Istio >= 1.28.1 or Envoy
//! `ORIGINAL_DST` multi-port pools are routed directly and `single-profile-handler` is the
//! replacement): runs the first profile once like `single-profile-handler`, then sends the
//! request to `primaryPort` on the chosen pod (the sidecar) and names the chosen rank in
//! `x-data-parallel-host-port: <ip>:<rank port>`. The port rewrite is
//! `SchedulingResult::destination_port`. Parameters: `primaryPort` (8000, > 0). Expects
//! exactly one profile (extra profiles are never run).

use std::sync::Arc;

use serde::Deserialize;

use crate::framework::ScheduleError;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, PreRequest, ProfileHandler};
use crate::framework::result::{HeaderEdits, ProfileResults, SchedulingResult};
use crate::request::headers::DATA_PARALLEL_HOST_PORT;

/// Type name.
pub const TYPE: &str = "data-parallel-profile-handler";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Sidecar port every request is sent to.
    pub primary_port: u16,
}

impl Default for Params {
    fn default() -> Self {
        Self { primary_port: 8000 }
    }
}

/// The handler.
#[derive(Debug)]
pub struct DataParallelHandler {
    primary_port: u16,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if p.primary_port == 0 {
        return Err(BuildError::new(format!("{}.parameters.primaryPort", spec.path), "must be > 0"));
    }
    let h = Arc::new(DataParallelHandler { primary_port: p.primary_port });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_profile_handler(h.clone()).with_pre_request(h))
}

impl ProfileHandler for DataParallelHandler {
    fn pick(&self, _: &SchedulingContext<'_>, profiles: &[Arc<str>], results: &ProfileResults) -> Vec<Arc<str>> {
        if results.entries.is_empty() { profiles.iter().take(1).cloned().collect() } else { Vec::new() }
    }

    fn process_results(
        &self,
        _: &SchedulingContext<'_>,
        results: ProfileResults,
    ) -> Result<SchedulingResult, ScheduleError> {
        let Some((name, result)) = results.entries.into_iter().find_map(|(n, r)| r.map(|r| (n, r))) else {
            return Err(ScheduleError::NoResult { reason: "the scheduling profile found no endpoint".into() });
        };
        let mut out = SchedulingResult::new(name.clone(), vec![(name, result)]);
        out.destination_port = Some(self.primary_port);
        Ok(out)
    }
}

impl PreRequest for DataParallelHandler {
    fn pre_request(&self, _: &SchedulingContext<'_>, result: &SchedulingResult, headers: &mut HeaderEdits) {
        if let Some(target) = result.primary().and_then(|r| r.targets.first()) {
            headers.set(DATA_PARALLEL_HOST_PORT, target.endpoint.host_port.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::model::Endpoint;
    use crate::framework::result::ProfileResult;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn destination_goes_to_the_sidecar_port_and_header_names_the_rank() {
        let h = DataParallelHandler { primary_port: 8000 };
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let mut rank = endpoint("pod-rank-1").build();
        rank.endpoint = Arc::new(Endpoint::new("pod-rank-1", "10.0.0.5".parse().unwrap(), 8001));
        let profiles: Vec<Arc<str>> = vec!["default".into()];
        assert_eq!(h.pick(&cx, &profiles, &ProfileResults::default()), profiles);
        let mut results = ProfileResults::default();
        results.insert("default".into(), Some(ProfileResult { targets: vec![rank] }));
        assert!(h.pick(&cx, &profiles, &results).is_empty());
        let result = h.process_results(&cx, results).unwrap();
        assert_eq!(result.destination(), "10.0.0.5:8000");
        let mut edits = HeaderEdits::default();
        h.pre_request(&cx, &result, &mut edits);
        assert_eq!(edits.set, vec![(DATA_PARALLEL_HOST_PORT.to_string(), "10.0.0.5:8001".to_string())]);
    }
}
