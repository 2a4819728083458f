//! `session-affinity-scorer` (strategy `encoded_endpoint_header`): keeps a conversation on the
//! endpoint that served it. The response carries `x-session-token` (configurable) = base64 of
//! the chosen endpoint id; a request echoing the token scores 1.0 on that endpoint and 0 on
//! the others (no or undecodable token: 0 everywhere). The token is written by a response
//! hook from the primary profile's first target (or `profileName`'s, when set).
//!
//! Parameters: `strategy` (`encoded_endpoint_header`; `session_id` is not available in this
//! build and is rejected), `profileName` (""), `encodedEndpointHeaderConfig.header`
//! (`x-session-token`), `sessionIdConfig`, `evictionTtlSeconds` (300), `evictionSweepSeconds`
//! (10) (the last three only matter for `session_id`).

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::plugins::registry::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::plugins::{PluginInstance, ResponseHook, Scorer};
use crate::request::InferenceRequest;
use crate::request::headers::SESSION_TOKEN;
use crate::request::usage::Usage;
use crate::scheduling::context::SchedulingContext;
use crate::scheduling::result::{HeaderEdits, SchedulingResult};

/// Type name.
pub const TYPE: &str = "session-affinity-scorer";

/// `encodedEndpointHeaderConfig`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeaderConfig {
    /// Header carrying the token.
    pub header: String,
}

impl Default for HeaderConfig {
    fn default() -> Self {
        Self { header: SESSION_TOKEN.into() }
    }
}

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `encoded_endpoint_header` or `session_id`.
    pub strategy: String,
    /// Profile whose target the token names ("" = primary).
    pub profile_name: String,
    /// Header settings.
    pub encoded_endpoint_header_config: HeaderConfig,
    /// Session-id sources (`session_id` strategy).
    pub session_id_config: Option<serde_json::Value>,
    /// Session eviction TTL (`session_id` strategy).
    pub eviction_ttl_seconds: u64,
    /// Sweep period (`session_id` strategy).
    pub eviction_sweep_seconds: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            strategy: "encoded_endpoint_header".into(),
            profile_name: String::new(),
            encoded_endpoint_header_config: HeaderConfig::default(),
            session_id_config: None,
            eviction_ttl_seconds: 300,
            eviction_sweep_seconds: 10,
        }
    }
}

/// The scorer and response hook.
#[derive(Debug)]
pub struct SessionAffinity {
    header: String,
    profile: Option<String>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    match p.strategy.as_str() {
        "encoded_endpoint_header" => {}
        "session_id" => {
            return Err(BuildError::new(
                at("strategy"),
                "the session_id strategy is not available in this build; use encoded_endpoint_header",
            ));
        }
        other => {
            return Err(BuildError::new(
                at("strategy"),
                format!("unknown strategy {other:?} (encoded_endpoint_header or session_id)"),
            ));
        }
    }
    if p.encoded_endpoint_header_config.header.is_empty() {
        return Err(BuildError::new(at("encodedEndpointHeaderConfig.header"), "must not be empty"));
    }
    let s = Arc::new(SessionAffinity {
        header: p.encoded_endpoint_header_config.header.to_ascii_lowercase(),
        profile: Some(p.profile_name).filter(|n| !n.is_empty()),
    });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_response(s))
}

/// The token for an endpoint id.
pub fn encode_token(endpoint_id: &str) -> String {
    STANDARD.encode(endpoint_id)
}

impl Scorer for SessionAffinity {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let target = cx
            .request
            .headers
            .get(&self.header)
            .and_then(|t| STANDARD.decode(t.trim()).ok())
            .and_then(|b| String::from_utf8(b).ok());
        candidates.iter().map(|c| if target.as_deref() == Some(&**c.id()) { 1.0 } else { 0.0 }).collect()
    }
}

impl ResponseHook for SessionAffinity {
    fn edit_response_headers(&self, _: &InferenceRequest, result: &SchedulingResult, edits: &mut HeaderEdits) {
        let profile = self.profile.as_deref().unwrap_or(&result.primary_profile);
        if let Some(t) = result.profile(profile).and_then(|r| r.targets.first()) {
            edits.set(&self.header, encode_token(t.id()));
        }
    }

    fn on_response_complete(&self, _: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::headers::RequestHeaders;
    use crate::scheduling::result::ProfileResult;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn token_round_trip() {
        let s = SessionAffinity { header: SESSION_TOKEN.into(), profile: None };
        let result = SchedulingResult::new(
            "d".into(),
            vec![("d".into(), ProfileResult { targets: vec![endpoint("pod-b").build()] })],
        );
        let mut edits = HeaderEdits::default();
        s.edit_response_headers(&InferenceRequest::default(), &result, &mut edits);
        assert_eq!(edits.set, vec![(SESSION_TOKEN.to_string(), encode_token("pod-b"))]);
        let request = InferenceRequest {
            headers: RequestHeaders { all: vec![(SESSION_TOKEN.into(), encode_token("pod-b"))] },
            ..Default::default()
        };
        let data = Default::default();
        let c = [endpoint("pod-a").build(), endpoint("pod-b").build()];
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.0, 1.0]);
        let none = InferenceRequest::default();
        assert_eq!(s.score(&context_for(&none, &data), &c), vec![0.0, 0.0]);
        super::super::contract::check(&s, &data);
    }

    #[test]
    fn session_id_strategy_is_rejected_with_a_path() {
        let spec = PluginSpec {
            name: "s".into(),
            type_name: TYPE.into(),
            parameters: serde_json::json!({"strategy": "session_id"}),
            path: "plugins[0]".into(),
        };
        assert_eq!(build(&spec, &BuildContext::default()).unwrap_err().path, "plugins[0].parameters.strategy");
    }
}
