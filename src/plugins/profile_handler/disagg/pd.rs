//! `pd-profile-handler` (deprecated since llm-d v0.7; replacement `disagg-profile-handler`):
//! its parameters mapped onto the same handler, decode-first, no encode stage.
//!
//! Parameters: `decodeProfile` (`decode`), `prefillProfile` (`prefill`), `deciderPluginName`
//! (`prefix-based-pd-decider`; must name a decider declared earlier), `threshold` (v0.2 - v0.5:
//! used only when that decider is not declared: 0 = always disaggregate, N = a
//! `prefix-based-pd-decider` with `nonCachedTokens: N`), `primaryPort` (0 = off; otherwise the
//! destination port becomes `primaryPort` and `x-data-parallel-host-port` names the chosen
//! rank). `prefixPluginType`, `prefixPluginName`, `prefixMatchInfoProducerName` and
//! `hashBlockSize` are accepted and ignored with a warning (prefix data comes from the
//! producer). Decisions are counted in `llm_d_epp_pd_decision_total{plugin_name, plugin_type,
//! model_name, decision_type}` (`decode-only` | `prefill-decode`) and its deprecated twin
//! `llm_d_inference_scheduler_pd_decision_total{model_name, decision_type}`, not in the
//! disagg decision family.

use std::sync::Arc;

use super::params::{DeciderRef, PdParams, Settings, StageOrder};
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::Decider;
use crate::framework::plugin::PluginInstance;
use crate::plugins::decider::{AlwaysDecider, prefix_based::PrefixBasedDecider};

/// Type name.
pub const TYPE: &str = "pd-profile-handler";
/// Default decider name.
const DEFAULT_DECIDER: &str = "prefix-based-pd-decider";

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: PdParams = decode_params(spec)?;
    tracing::warn!(plugin = %spec.name, "pd-profile-handler is deprecated; use disagg-profile-handler");
    if p.prefix_plugin_type.is_some()
        || p.prefix_plugin_name.is_some()
        || p.prefix_match_info_producer_name.is_some()
        || p.hash_block_size.is_some()
    {
        tracing::warn!(plugin = %spec.name, "pd-profile-handler: prefixPluginType/prefixPluginName/prefixMatchInfoProducerName/hashBlockSize are ignored");
    }
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let explicit = p.decider_plugin_name.clone().filter(|n| !n.is_empty());
    let name = explicit.clone().unwrap_or_else(|| DEFAULT_DECIDER.to_string());
    let declared = cx.earlier.iter().any(|i| *i.name == *name);
    let decider: Arc<dyn Decider> = match p.threshold {
        Some(t) if !declared && explicit.is_none() => match u64::try_from(t) {
            Ok(0) => Arc::new(AlwaysDecider),
            Ok(n) => Arc::new(PrefixBasedDecider::new(n, 0)),
            Err(_) => return Err(BuildError::new(at("threshold"), "must be >= 0")),
        },
        _ => cx.resolve(spec, "deciderPluginName", &name, "decider", |i| i.decider.clone())?,
    };
    let primary_port = p.primary_port.filter(|port| *port > 0);
    let settings = Settings {
        decode: p.decode_profile.filter(|s| !s.is_empty()).unwrap_or_else(|| "decode".into()),
        prefill: p.prefill_profile.filter(|s| !s.is_empty()).unwrap_or_else(|| "prefill".into()),
        encode: "encode".into(),
        prefill_decider: Some(DeciderRef { param: "deciderPluginName", name }),
        encode_decider: None,
        order: StageOrder::DecodeFirst,
    };
    Ok(super::instance(spec, cx, TYPE, settings, Some(decider), None, primary_port))
}
