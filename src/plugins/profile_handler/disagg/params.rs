//! Parameters of `disagg-profile-handler` (nested form and the legacy flat keys) and of the
//! deprecated `pd-profile-handler`, both reduced to one `Settings` value.

use serde::Deserialize;

use crate::framework::build::{BuildError, PluginSpec, decode_params};

/// Order in which the stages run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageOrder {
    /// Decode, then (encode), then prefill; deciders see the decode endpoint.
    DecodeFirst,
    /// Prefill, then (encode), then decode.
    PrefillFirst,
}

impl StageOrder {
    /// Parses `decode-first`/`decode`/`prefill-first`/`prefill`, ignoring case, `-` and `_`.
    pub fn parse(s: &str) -> Option<Self> {
        let norm: String = s.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_ascii_lowercase();
        match norm.as_str() {
            "decodefirst" | "decode" => Some(Self::DecodeFirst),
            "prefillfirst" | "prefill" => Some(Self::PrefillFirst),
            _ => None,
        }
    }
}

/// `profiles: {decode, prefill, encode}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileNames {
    /// Decode profile name.
    pub decode: Option<String>,
    /// Prefill profile name.
    pub prefill: Option<String>,
    /// Encode profile name.
    pub encode: Option<String>,
}

/// `deciders: {prefill, encode}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeciderNames {
    /// Prefill (P/D) decider plugin name.
    pub prefill: Option<String>,
    /// Encode decider plugin name.
    pub encode: Option<String>,
}

/// `disagg-profile-handler` parameters as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Profile names.
    pub profiles: Option<ProfileNames>,
    /// Decider plugin names.
    pub deciders: Option<DeciderNames>,
    /// `decode-first` (default) or `prefill-first`.
    pub stage_order: Option<String>,
    /// Legacy: decode profile.
    pub decode_profile: Option<String>,
    /// Legacy: prefill profile.
    pub prefill_profile: Option<String>,
    /// Legacy: encode profile.
    pub encode_profile: Option<String>,
    /// Legacy: prefill decider.
    pub prefill_decider_plugin_name: Option<String>,
    /// Legacy: encode decider.
    pub encode_decider_plugin_name: Option<String>,
    /// Legacy: prefill decider (older spelling).
    pub decider_plugin_name: Option<String>,
}

/// `pd-profile-handler` parameters (v0.2 - v0.8 keys).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PdParams {
    /// Decode profile (`decode`).
    pub decode_profile: Option<String>,
    /// Prefill profile (`prefill`).
    pub prefill_profile: Option<String>,
    /// Decider plugin (`prefix-based-pd-decider`).
    pub decider_plugin_name: Option<String>,
    /// v0.2 - v0.5: uncached-token threshold used when no decider is declared (0 = always).
    pub threshold: Option<i64>,
    /// Sidecar port for data-parallel routing (0 = off; deprecated).
    pub primary_port: Option<u16>,
    /// Accepted and ignored (prefix data comes from the producer).
    pub prefix_plugin_type: Option<String>,
    /// Accepted and ignored.
    pub prefix_plugin_name: Option<String>,
    /// Accepted and ignored.
    pub prefix_match_info_producer_name: Option<String>,
    /// Accepted and ignored (v0.2 - v0.5 character block size).
    pub hash_block_size: Option<i64>,
}

/// Where a decider comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeciderRef {
    /// Parameter path below `parameters` (for errors).
    pub param: &'static str,
    /// Plugin name.
    pub name: String,
}

/// Normalised settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Decode profile.
    pub decode: String,
    /// Prefill profile.
    pub prefill: String,
    /// Encode profile.
    pub encode: String,
    /// Prefill decider.
    pub prefill_decider: Option<DeciderRef>,
    /// Encode decider.
    pub encode_decider: Option<DeciderRef>,
    /// Stage order.
    pub order: StageOrder,
}

fn named(param: &'static str, name: Option<String>) -> Option<DeciderRef> {
    name.filter(|n| !n.is_empty()).map(|name| DeciderRef { param, name })
}

/// Decodes and checks `disagg-profile-handler` parameters.
pub fn settings(spec: &PluginSpec) -> Result<Settings, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let legacy = [
        &p.decode_profile,
        &p.prefill_profile,
        &p.encode_profile,
        &p.prefill_decider_plugin_name,
        &p.encode_decider_plugin_name,
        &p.decider_plugin_name,
    ];
    let has_legacy = legacy.iter().any(|v| v.is_some());
    if has_legacy && (p.profiles.is_some() || p.deciders.is_some()) {
        return Err(BuildError::new(
            at("profiles"),
            "legacy flat keys (decodeProfile, prefillDeciderPluginName, ...) cannot be mixed with `profiles`/`deciders`",
        ));
    }
    if p.prefill_decider_plugin_name.is_some() && p.decider_plugin_name.is_some() {
        return Err(BuildError::new(
            at("deciderPluginName"),
            "set either prefillDeciderPluginName or deciderPluginName, not both",
        ));
    }
    if has_legacy {
        tracing::warn!(plugin = %spec.name, "disagg-profile-handler: flat parameter keys are deprecated; use `profiles` and `deciders`");
    }
    let profiles = p.profiles.unwrap_or_default();
    let deciders = p.deciders.unwrap_or_default();
    let order = match p.stage_order.as_deref() {
        None => StageOrder::DecodeFirst,
        Some(s) => StageOrder::parse(s).ok_or_else(|| {
            BuildError::new(at("stageOrder"), format!("unknown stage order {s:?} (decode-first or prefill-first)"))
        })?,
    };
    let prefill_decider = if has_legacy {
        named("prefillDeciderPluginName", p.prefill_decider_plugin_name)
            .or_else(|| named("deciderPluginName", p.decider_plugin_name))
    } else {
        named("deciders.prefill", deciders.prefill)
    };
    let encode_decider = if has_legacy {
        named("encodeDeciderPluginName", p.encode_decider_plugin_name)
    } else {
        named("deciders.encode", deciders.encode)
    };
    if order == StageOrder::PrefillFirst && prefill_decider.is_some() {
        return Err(BuildError::new(
            at("stageOrder"),
            "prefill-first runs prefill unconditionally; remove the prefill decider or use decode-first",
        ));
    }
    let or = |v: Option<String>, l: Option<String>, d: &str| {
        v.or(l).filter(|s| !s.is_empty()).unwrap_or_else(|| d.to_string())
    };
    Ok(Settings {
        decode: or(profiles.decode, p.decode_profile, "decode"),
        prefill: or(profiles.prefill, p.prefill_profile, "prefill"),
        encode: or(profiles.encode, p.encode_profile, "encode"),
        prefill_decider,
        encode_decider,
        order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> PluginSpec {
        PluginSpec {
            name: "h".into(),
            type_name: "disagg-profile-handler".into(),
            parameters: v,
            path: "plugins[2]".into(),
        }
    }

    #[test]
    fn stage_order_spellings() {
        for s in ["decode-first", "Decode_First", "DECODE", "decodefirst"] {
            assert_eq!(StageOrder::parse(s), Some(StageOrder::DecodeFirst), "{s}");
        }
        for s in ["prefill-first", "Prefill_first", "prefill"] {
            assert_eq!(StageOrder::parse(s), Some(StageOrder::PrefillFirst), "{s}");
        }
        assert_eq!(StageOrder::parse("encode"), None);
    }

    #[test]
    fn nested_and_legacy_forms() {
        let s =
            settings(&spec(serde_json::json!({"profiles": {"decode": "d"}, "deciders": {"prefill": "x"}}))).unwrap();
        assert_eq!((s.decode.as_str(), s.prefill.as_str(), s.encode.as_str()), ("d", "prefill", "encode"));
        assert_eq!(s.prefill_decider, Some(DeciderRef { param: "deciders.prefill", name: "x".into() }));
        let s = settings(&spec(serde_json::json!({"decodeProfile": "dd", "deciderPluginName": "y"}))).unwrap();
        assert_eq!(s.decode, "dd");
        assert_eq!(s.prefill_decider.map(|d| d.name), Some("y".into()));
        assert!(settings(&spec(serde_json::json!({"decodeProfile": "dd", "profiles": {}}))).is_err(), "not mixable");
        assert!(settings(&spec(serde_json::json!({"bogus": 1}))).is_err(), "unknown key");
        let s = settings(&spec(serde_json::Value::Null)).unwrap();
        assert_eq!(s.order, StageOrder::DecodeFirst);
        assert!(s.prefill_decider.is_none());
    }

    #[test]
    fn prefill_first_with_a_prefill_decider_is_rejected() {
        let e = settings(&spec(serde_json::json!({"stageOrder": "prefill_first", "deciders": {"prefill": "x"}})))
            .unwrap_err();
        assert_eq!(e.path, "plugins[2].parameters.stageOrder");
        assert!(settings(&spec(serde_json::json!({"stageOrder": "prefill-first"}))).is_ok());
        assert!(settings(&spec(serde_json::json!({"stageOrder": "sideways"}))).is_err());
    }
}
