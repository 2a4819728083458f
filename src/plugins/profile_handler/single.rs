//! `single-profile-handler`: runs the one profile once; its result is the primary. Injected
//! automatically when a config has exactly one profile and no handler. No parameters.

use std::sync::Arc;

use crate::framework::ScheduleError;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, ProfileHandler};
use crate::framework::result::{ProfileResults, SchedulingResult};

/// Type name.
pub const TYPE: &str = "single-profile-handler";

/// Runs every profile once (the loader guarantees there is exactly one).
#[derive(Debug, Default)]
pub struct SingleProfileHandler;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: crate::plugins::producer::passive::NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_profile_handler(Arc::new(SingleProfileHandler)))
}

impl ProfileHandler for SingleProfileHandler {
    fn pick(&self, _: &SchedulingContext<'_>, profiles: &[Arc<str>], results: &ProfileResults) -> Vec<Arc<str>> {
        if results.entries.is_empty() { profiles.to_vec() } else { Vec::new() }
    }

    fn process_results(
        &self,
        _: &SchedulingContext<'_>,
        results: ProfileResults,
    ) -> Result<SchedulingResult, ScheduleError> {
        let mut ok = results.entries.into_iter().filter_map(|(n, r)| r.map(|r| (n, r)));
        let Some((name, result)) = ok.next() else {
            return Err(ScheduleError::NoResult { reason: "the scheduling profile found no endpoint".into() });
        };
        Ok(SchedulingResult::new(name.clone(), vec![(name, result)]))
    }
}
