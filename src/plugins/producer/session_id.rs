//! `session-id-producer`: the request's session id (`SessionID`), read from one request
//! header or one cookie of the `Cookie` header, before any profile runs. Absent or empty →
//! no session id (consumers treat that as "no session preference").
//!
//! Parameters (llm-d): exactly one of `headerName` (case-insensitive) or `cookieName` (exact
//! name; a value in double quotes is unquoted) when a `parameters` block is given; without
//! one (as when auto-created for a consumer of `SessionID`) the header `x-session-id`.
//! `lruSize` (1024) and `ttl` (`30m`) configure llm-d's session → endpoint binding cache
//! (`BoundEndpoint`); they are checked (> 0) and accepted, but this build keeps no binding
//! cache: no plugin here reads `BoundEndpoint`.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, de_duration, decode_params};
use crate::framework::context::DataKey;
use crate::framework::data::RequestData;
use crate::framework::plugin::{DataProducer, PluginInstance};
use crate::request::InferenceRequest;
use crate::request::headers::RequestHeaders;

/// Type name.
pub const TYPE: &str = "session-id-producer";
/// Header read when no parameters are given.
pub const DEFAULT_HEADER: &str = "x-session-id";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Request header carrying the session id.
    pub header_name: Option<String>,
    /// Cookie carrying the session id.
    pub cookie_name: Option<String>,
    /// Binding cache size (accepted; > 0).
    pub lru_size: Option<i64>,
    /// Binding lifetime (accepted; > 0).
    #[serde(deserialize_with = "de_opt_duration")]
    pub ttl: Option<Duration>,
}

fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

/// Where the session id comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A request header (lower-case name).
    Header(String),
    /// A cookie of the `Cookie` header.
    Cookie(String),
}

impl Source {
    /// The session id of these headers, when present and non-empty.
    pub fn read(&self, headers: &RequestHeaders) -> Option<String> {
        let value = match self {
            Source::Header(name) => headers.get(name).map(str::trim).map(str::to_string),
            Source::Cookie(name) => cookie(headers, name),
        };
        value.filter(|v| !v.is_empty())
    }
}

/// The value of cookie `name` in any `Cookie` header (`a=1; b=2`), unquoted.
pub fn cookie(headers: &RequestHeaders, name: &str) -> Option<String> {
    headers
        .all
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("cookie"))
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| {
            let v = v.trim();
            v.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(v).to_string()
        })
}

/// The producer.
#[derive(Debug)]
pub struct SessionIdProducer {
    source: Source,
}

impl SessionIdProducer {
    /// A producer reading `source`.
    pub fn new(source: Source) -> Self {
        Self { source }
    }
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    let source = if spec.parameters.is_null() {
        Source::Header(DEFAULT_HEADER.into())
    } else {
        let p: Params = decode_params(spec)?;
        if p.lru_size.is_some_and(|n| n <= 0) {
            return Err(BuildError::new(at("lruSize"), "must be > 0"));
        }
        if p.ttl.is_some_and(|t| t.is_zero()) {
            return Err(BuildError::new(at("ttl"), "must be > 0"));
        }
        match (p.header_name.filter(|h| !h.is_empty()), p.cookie_name.filter(|c| !c.is_empty())) {
            (Some(h), None) => Source::Header(h.to_ascii_lowercase()),
            (None, Some(c)) => Source::Cookie(c),
            _ => {
                return Err(BuildError::new(
                    format!("{}.parameters", spec.path),
                    "set exactly one of headerName or cookieName",
                ));
            }
        }
    };
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_producer(Arc::new(SessionIdProducer::new(source))))
}

impl DataProducer for SessionIdProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::SessionId]
    }

    fn produce(&self, request: &InferenceRequest, _: &[Candidate], data: &mut RequestData) {
        data.session_id = self.source.read(&request.headers).map(Arc::from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(all: &[(&str, &str)]) -> RequestHeaders {
        RequestHeaders { all: all.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    fn spec(parameters: serde_json::Value) -> PluginSpec {
        PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters, path: "plugins[0]".into() }
    }

    fn produced(parameters: serde_json::Value, all: &[(&str, &str)]) -> Option<String> {
        let inst = build(&spec(parameters), &BuildContext::default()).expect("builds");
        let request = InferenceRequest { headers: headers(all), ..Default::default() };
        let mut data = RequestData::default();
        inst.producer.expect("a producer").produce(&request, &[], &mut data);
        data.session_id.map(|s| s.to_string())
    }

    #[test]
    fn default_reads_x_session_id_case_insensitively() {
        assert_eq!(produced(serde_json::Value::Null, &[("X-Session-Id", "s1")]).as_deref(), Some("s1"));
        assert_eq!(produced(serde_json::Value::Null, &[("other", "s1")]), None);
    }

    #[test]
    fn missing_or_empty_value_gives_no_session() {
        assert_eq!(produced(serde_json::Value::Null, &[]), None);
        assert_eq!(produced(serde_json::Value::Null, &[("x-session-id", "  ")]), None);
        let cookie = serde_json::json!({"cookieName": "sid"});
        assert_eq!(produced(cookie.clone(), &[("cookie", "sid=")]), None);
        assert_eq!(produced(cookie, &[("cookie", "garbage;;=;sidx=1")]), None);
    }

    #[test]
    fn custom_header() {
        let p = serde_json::json!({"headerName": "X-My-Session"});
        assert_eq!(produced(p.clone(), &[("x-my-session", "abc")]).as_deref(), Some("abc"));
        assert_eq!(produced(p, &[("x-session-id", "abc")]), None);
    }

    #[test]
    fn cookie_among_several_and_quoted() {
        let p = serde_json::json!({"cookieName": "llm-d-session"});
        let got = produced(p.clone(), &[("cookie", "a=1; llm-d-session=xyz; b=2")]);
        assert_eq!(got.as_deref(), Some("xyz"));
        assert_eq!(produced(p.clone(), &[("cookie", "a=1"), ("cookie", "llm-d-session=\"q\"")]).as_deref(), Some("q"));
        assert_eq!(produced(p, &[("x-session-id", "h")]), None, "the header is not read in cookie mode");
    }

    #[test]
    fn parameters_are_checked() {
        let err = |p| build(&spec(p), &BuildContext::default()).err().map(|e| e.path);
        assert_eq!(err(serde_json::json!({})).as_deref(), Some("plugins[0].parameters"));
        assert_eq!(
            err(serde_json::json!({"headerName": "a", "cookieName": "b"})).as_deref(),
            Some("plugins[0].parameters")
        );
        assert_eq!(
            err(serde_json::json!({"headerName": "a", "lruSize": 0})).as_deref(),
            Some("plugins[0].parameters.lruSize")
        );
        assert_eq!(
            err(serde_json::json!({"headerName": "a", "ttl": "0s"})).as_deref(),
            Some("plugins[0].parameters.ttl")
        );
        assert!(err(serde_json::json!({"headerName": "a", "ttl": "soon"})).is_some());
        assert!(err(serde_json::json!({"headerName": "a", "bogus": 1})).is_some());
        assert_eq!(err(serde_json::json!({"cookieName": "c", "ttl": "1h", "lruSize": 4096})), None);
    }
}
