//! `session-affinity-scorer`: keeps a conversation on the endpoint that served it; the
//! endpoint of the session scores 1.0, the others 0 (no session: 0 everywhere). Two
//! strategies:
//! - `encoded_endpoint_header` (default, stateless): the response carries `x-session-token`
//!   (configurable) = base64 of the chosen endpoint id, written by a response hook from the
//!   primary profile's first target (or `profileName`'s); a request echoing the token is
//!   pinned to that endpoint.
//! - `session_id` (stateful): the client sends an opaque session id, read from
//!   `sessionIdConfig.sources` in order (`header: x-session-id` by default; `attribute`
//!   sources name request attributes, which no plugin of this build publishes, so they
//!   never match). After each decision a pre-request hook binds the id to the endpoint the
//!   request went to (rebinding if it moved); bindings unused for `evictionTtlSeconds`
//!   (300; 0 = never) stop counting and are swept every `evictionSweepSeconds` (10).
//!   Nothing is written back to the client. With replica sync (docs/replicas.md) every
//!   binding is published and other replicas' bindings are applied here, last used at
//!   their publish time.
//!
//! Parameters: `strategy`, `profileName` (""), `encodedEndpointHeaderConfig.header`,
//! `sessionIdConfig: {sources, evictionTtlSeconds, evictionSweepSeconds}` (the two eviction
//! keys are also read at the top level, where older configs put them).

mod sessions;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, PluginName, PreRequest, ResponseHook, Scorer};
use crate::framework::replica::{Origin, ReplicaHandle, SharedState, SharedUpdate};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::request::InferenceRequest;
use crate::request::headers::SESSION_TOKEN;
use crate::request::usage::Usage;
pub use sessions::Sessions;

/// Type name.
pub const TYPE: &str = "session-affinity-scorer";
/// Default session-id header of the `session_id` strategy.
pub const SESSION_ID_HEADER: &str = "x-session-id";

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

/// One `sessionIdConfig.sources[]` entry: exactly one of the two.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Source {
    /// A request header.
    pub header: Option<String>,
    /// A request attribute published by an upstream plugin.
    pub attribute: Option<String>,
}

/// `sessionIdConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionIdConfig {
    /// Where the session id is read from, first non-empty wins (default: `x-session-id`).
    pub sources: Vec<Source>,
    /// Idle time before a binding is dropped (seconds).
    pub eviction_ttl_seconds: Option<f64>,
    /// Sweep period (seconds).
    pub eviction_sweep_seconds: Option<f64>,
}

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// `encoded_endpoint_header` or `session_id`.
    pub strategy: String,
    /// Profile whose target is remembered ("" = primary).
    pub profile_name: String,
    /// Header settings.
    pub encoded_endpoint_header_config: HeaderConfig,
    /// Session-id settings.
    pub session_id_config: SessionIdConfig,
    /// Session eviction TTL (top-level spelling).
    pub eviction_ttl_seconds: Option<f64>,
    /// Sweep period (top-level spelling).
    pub eviction_sweep_seconds: Option<f64>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            strategy: "encoded_endpoint_header".into(),
            profile_name: String::new(),
            encoded_endpoint_header_config: HeaderConfig::default(),
            session_id_config: SessionIdConfig::default(),
            eviction_ttl_seconds: None,
            eviction_sweep_seconds: None,
        }
    }
}

/// How the session is identified.
#[derive(Debug)]
enum Strategy {
    /// The request echoes a token naming the endpoint.
    Token { header: String },
    /// The request names a session the plugin remembers.
    SessionId { headers: Vec<String>, sessions: Sessions },
}

/// The scorer, pre-request hook and response hook.
#[derive(Debug)]
pub struct SessionAffinity {
    strategy: Strategy,
    profile: Option<String>,
    name: PluginName,
    replica: ReplicaHandle,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let strategy = match p.strategy.as_str() {
        "encoded_endpoint_header" => {
            if p.encoded_endpoint_header_config.header.is_empty() {
                return Err(BuildError::new(at("encodedEndpointHeaderConfig.header"), "must not be empty"));
            }
            Strategy::Token { header: p.encoded_endpoint_header_config.header.to_ascii_lowercase() }
        }
        "session_id" => session_id_strategy(&p, &at)?,
        other => {
            return Err(BuildError::new(
                at("strategy"),
                format!("unknown strategy {other:?} (encoded_endpoint_header or session_id)"),
            ));
        }
    };
    let token = matches!(strategy, Strategy::Token { .. });
    let s = Arc::new(SessionAffinity {
        strategy,
        profile: Some(p.profile_name).filter(|n| !n.is_empty()),
        name: spec.name.clone(),
        replica: cx.replica.clone(),
    });
    let instance = PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone());
    Ok(if token {
        instance.with_response(s)
    } else {
        cx.replica.register(&spec.name, &s);
        instance.with_pre_request(s)
    })
}

fn session_id_strategy(p: &Params, at: &dyn Fn(&str) -> String) -> Result<Strategy, BuildError> {
    let c = &p.session_id_config;
    let mut headers = Vec::new();
    for (i, source) in c.sources.iter().enumerate() {
        match (&source.header, &source.attribute) {
            (Some(h), None) if !h.is_empty() => headers.push(h.to_ascii_lowercase()),
            (None, Some(a)) if !a.is_empty() => {}
            _ => {
                return Err(BuildError::new(
                    at(&format!("sessionIdConfig.sources[{i}]")),
                    "set exactly one of `header` or `attribute`",
                ));
            }
        }
    }
    if c.sources.is_empty() {
        headers.push(SESSION_ID_HEADER.into());
    }
    let seconds = |nested: Option<f64>, top: Option<f64>, default: f64, key: &str, zero_ok: bool| {
        let v = nested.or(top).unwrap_or(default);
        let ok = v.is_finite() && if zero_ok { v >= 0.0 } else { v > 0.0 };
        let rule = if zero_ok { "must be >= 0" } else { "must be > 0" };
        ok.then(|| Duration::from_secs_f64(v))
            .ok_or_else(|| BuildError::new(at(&format!("sessionIdConfig.{key}")), rule))
    };
    let ttl = seconds(c.eviction_ttl_seconds, p.eviction_ttl_seconds, 300.0, "evictionTtlSeconds", true)?;
    let sweep = seconds(c.eviction_sweep_seconds, p.eviction_sweep_seconds, 10.0, "evictionSweepSeconds", false)?;
    Ok(Strategy::SessionId { headers, sessions: Sessions::new(ttl, sweep) })
}

/// The token for an endpoint id.
pub fn encode_token(endpoint_id: &str) -> String {
    STANDARD.encode(endpoint_id)
}

impl SessionAffinity {
    /// The endpoint the request's session is pinned to, if any.
    fn pinned(&self, cx: &SchedulingContext<'_>) -> Option<String> {
        match &self.strategy {
            Strategy::Token { header } => cx
                .request
                .headers
                .get(header)
                .and_then(|t| STANDARD.decode(t.trim()).ok())
                .and_then(|b| String::from_utf8(b).ok()),
            Strategy::SessionId { headers, sessions } => {
                let id = session_id(headers, cx.request)?;
                sessions.endpoint(id, cx.now).map(|e| e.to_string())
            }
        }
    }

    /// The endpoint this plugin remembers from a decision.
    fn remembered<'r>(&self, result: &'r SchedulingResult) -> Option<&'r Candidate> {
        let profile = self.profile.as_deref().unwrap_or(&result.primary_profile);
        result.profile(profile).and_then(|r| r.targets.first())
    }
}

/// The first non-empty session id among the header sources.
fn session_id<'r>(headers: &[String], request: &'r InferenceRequest) -> Option<&'r str> {
    headers.iter().find_map(|h| request.headers.get(h).map(str::trim).filter(|v| !v.is_empty()))
}

impl Scorer for SessionAffinity {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        let target = self.pinned(cx);
        candidates.iter().map(|c| if target.as_deref() == Some(&**c.id()) { 1.0 } else { 0.0 }).collect()
    }
}

impl PreRequest for SessionAffinity {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let Strategy::SessionId { headers, sessions } = &self.strategy else { return };
        if let (Some(id), Some(target)) = (session_id(headers, cx.request), self.remembered(result)) {
            sessions.bind(id, target.id().clone(), cx.now);
            let endpoint = target.id().clone();
            self.replica.publish(&self.name, || SharedUpdate::SessionBound { session: id.to_string(), endpoint });
        }
    }
}

impl SharedState for SessionAffinity {
    fn apply(&self, origin: Origin<'_>, update: &SharedUpdate) {
        let (Strategy::SessionId { sessions, .. }, SharedUpdate::SessionBound { session, endpoint }) =
            (&self.strategy, update)
        else {
            return;
        };
        let now = tokio::time::Instant::now();
        sessions.bind(session, endpoint.clone(), now.checked_sub(origin.age).unwrap_or(now));
    }
}

impl ResponseHook for SessionAffinity {
    fn edit_response_headers(&self, _: &InferenceRequest, result: &SchedulingResult, edits: &mut HeaderEdits) {
        if let (Strategy::Token { header }, Some(t)) = (&self.strategy, self.remembered(result)) {
            edits.set(header, encode_token(t.id()));
        }
    }

    fn on_response_complete(&self, _: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::result::ProfileResult;
    use crate::request::headers::RequestHeaders;
    use crate::test_util::{context_for, endpoint};

    fn plugin(parameters: serde_json::Value) -> Result<PluginInstance, BuildError> {
        let spec = PluginSpec { name: "s".into(), type_name: TYPE.into(), parameters, path: "plugins[0]".into() };
        build(&spec, &BuildContext::default())
    }

    fn routed_to(pod: &str) -> SchedulingResult {
        SchedulingResult::new("d".into(), vec![("d".into(), ProfileResult { targets: vec![endpoint(pod).build()] })])
    }

    fn with_header(k: &str, v: &str) -> InferenceRequest {
        InferenceRequest { headers: RequestHeaders { all: vec![(k.into(), v.into())] }, ..Default::default() }
    }

    #[test]
    fn token_round_trip() {
        let s = SessionAffinity {
            strategy: Strategy::Token { header: SESSION_TOKEN.into() },
            profile: None,
            name: "s".into(),
            replica: ReplicaHandle::default(),
        };
        let mut edits = HeaderEdits::default();
        s.edit_response_headers(&InferenceRequest::default(), &routed_to("pod-b"), &mut edits);
        assert_eq!(edits.set, vec![(SESSION_TOKEN.to_string(), encode_token("pod-b"))]);
        let request = with_header(SESSION_TOKEN, &encode_token("pod-b"));
        let data = Default::default();
        let c = [endpoint("pod-a").build(), endpoint("pod-b").build()];
        assert_eq!(s.score(&context_for(&request, &data), &c), vec![0.0, 1.0]);
        let none = InferenceRequest::default();
        assert_eq!(s.score(&context_for(&none, &data), &c), vec![0.0, 0.0]);
        super::super::contract::check(&s, &data);
    }

    #[test]
    fn session_id_binds_after_the_decision_and_forgets_idle_sessions() {
        let inst = plugin(serde_json::json!({"strategy": "session_id",
            "sessionIdConfig": {"sources": [{"attribute": "agent-identity"}, {"header": "X-Conversation"}],
                                "evictionTtlSeconds": 60, "evictionSweepSeconds": 1}}))
        .unwrap();
        assert!(inst.response.is_none(), "session_id writes nothing back");
        let (scorer, hook) = (inst.scorer.unwrap(), inst.pre_request.unwrap());
        let data = Default::default();
        let c = [endpoint("pod-a").build(), endpoint("pod-b").build()];
        let request = with_header("x-conversation", "chat-7");
        let cx = context_for(&request, &data);
        assert_eq!(scorer.score(&cx, &c), vec![0.0, 0.0], "unknown session: no preference");
        hook.pre_request(&cx, &routed_to("pod-b"), &mut HeaderEdits::default());
        assert_eq!(scorer.score(&cx, &c), vec![0.0, 1.0], "the session returns to pod-b");
        let other = InferenceRequest::default();
        assert_eq!(scorer.score(&context_for(&other, &data), &c), vec![0.0, 0.0]);
        let later = SchedulingContext { now: cx.now + Duration::from_secs(60), ..context_for(&request, &data) };
        assert_eq!(scorer.score(&later, &c), vec![0.0, 0.0], "idle for the TTL");
    }

    #[test]
    fn session_id_parameters_are_checked_with_paths() {
        let path = |p: serde_json::Value| plugin(p).unwrap_err().path;
        assert!(plugin(serde_json::json!({"strategy": "session_id"})).is_ok(), "defaults: x-session-id, 300 s, 10 s");
        assert!(plugin(serde_json::json!({"strategy": "session_id", "evictionTtlSeconds": 0})).is_ok(), "0 = keep");
        assert_eq!(
            path(
                serde_json::json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "a", "attribute": "b"}]}})
            ),
            "plugins[0].parameters.sessionIdConfig.sources[0]"
        );
        assert_eq!(
            path(serde_json::json!({"strategy": "session_id", "sessionIdConfig": {"evictionSweepSeconds": 0}})),
            "plugins[0].parameters.sessionIdConfig.evictionSweepSeconds"
        );
        assert_eq!(path(serde_json::json!({"strategy": "sticky"})), "plugins[0].parameters.strategy");
    }
}
