//! Deciders: answer "run this extra stage?" for the `disagg-profile-handler` (prefill for P/D,
//! encode for multimodal). Declared under `plugins` and named from the handler's
//! `deciders.prefill` / `deciders.encode` parameters; never placed in a profile.
//!
//! - `always-disagg-pd-decider`: always (no parameters);
//! - `prefix-based-pd-decider`: only when enough of the prompt is not cached on the chosen
//!   decode endpoint (`prefix_based`);
//! - `always-disagg-multimodal-decider`: when a chat message carries an image, video or audio
//!   part (`multimodal`).

pub mod multimodal;
pub mod prefix_based;

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Decider, PluginInstance};
use crate::plugins::producer::passive::NoParams;

/// Type name of the always-on P/D decider.
pub const ALWAYS_PD: &str = "always-disagg-pd-decider";

/// Always disaggregates.
#[derive(Debug, Default)]
pub struct AlwaysDecider;

impl Decider for AlwaysDecider {
    fn disaggregate(&self, _: &SchedulingContext<'_>, _: Option<&Candidate>) -> bool {
        true
    }
}

/// Factory of `always-disagg-pd-decider`.
pub fn build_always(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), ALWAYS_PD).with_decider(Arc::new(AlwaysDecider)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chat_request, context_for};

    #[test]
    fn always_says_yes_and_rejects_parameters() {
        let request = chat_request("m", &["hi"]);
        let data = Default::default();
        assert!(AlwaysDecider.disaggregate(&context_for(&request, &data), None));
        let spec = PluginSpec {
            name: "d".into(),
            type_name: ALWAYS_PD.into(),
            parameters: serde_json::json!({"x": 1}),
            path: "plugins[0]".into(),
        };
        assert!(build_always(&spec, &BuildContext::default()).is_err());
    }
}
