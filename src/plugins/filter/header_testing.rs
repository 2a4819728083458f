//! `header-based-testing-filter` (GIE conformance test plugin): keeps the endpoints the
//! request names in header `test-epp-endpoint-selection`, a comma-separated list of `ip` or
//! `ip:port` (IPv6 in brackets, e.g. `[fd00::1]:8000`; a bare IPv6 address also parses).
//! An entry without a port matches every candidate at that IP; with a port, only that one.
//! Output follows the header order and holds each endpoint once, however many entries name
//! it (a repeated IP adds nothing). Unparsable entries are skipped. A missing or empty
//! header keeps nothing (so the profile fails, as GIE's conformance suite expects).
//!
//! No parameters.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance};
use crate::plugins::producer::passive::NoParams;

/// Type name.
pub const TYPE: &str = "header-based-testing-filter";
/// Header listing the endpoints to keep.
pub const SELECTION_HEADER: &str = "test-epp-endpoint-selection";

/// The filter.
#[derive(Debug, Default)]
pub struct HeaderBasedTestingFilter;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_filter(Arc::new(HeaderBasedTestingFilter)))
}

/// One header entry: an IP and, when given, a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selector {
    /// The address.
    pub ip: IpAddr,
    /// The port (`None` = any).
    pub port: Option<u16>,
}

impl Selector {
    /// Parses `ip`, `ip:port`, `[v6]` or `[v6]:port` (surrounding spaces ignored).
    pub fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if let Ok(addr) = entry.parse::<SocketAddr>() {
            return Some(Self { ip: addr.ip(), port: Some(addr.port()) });
        }
        let bare = entry.strip_prefix('[').and_then(|s| s.strip_suffix(']')).unwrap_or(entry);
        bare.parse::<IpAddr>().ok().map(|ip| Self { ip, port: None })
    }

    /// True when the selector names this endpoint.
    pub fn matches(&self, c: &Candidate) -> bool {
        c.endpoint.address == self.ip && self.port.is_none_or(|p| p == c.endpoint.port)
    }
}

/// The selectors of a header value, in order.
pub fn parse_selection(value: &str) -> Vec<Selector> {
    value.split(',').filter_map(Selector::parse).collect()
}

impl Filter for HeaderBasedTestingFilter {
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let Some(value) = cx.request.headers.get(SELECTION_HEADER).filter(|v| !v.trim().is_empty()) else {
            return Vec::new();
        };
        let mut taken = vec![false; candidates.len()];
        let mut out = Vec::new();
        for selector in parse_selection(value) {
            for (i, c) in candidates.iter().enumerate() {
                if !taken[i] && selector.matches(c) {
                    taken[i] = true;
                    out.push(c.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::InferenceRequest;
    use crate::test_util::{context_for, endpoint};

    fn candidates() -> Vec<Candidate> {
        vec![
            endpoint("a").at("10.0.0.1", 8000).build(),
            endpoint("a2").at("10.0.0.1", 8001).build(),
            endpoint("b").at("10.0.0.2", 8000).build(),
            endpoint("v6").at("fd00::1", 8000).build(),
        ]
    }

    fn kept(header: Option<&str>) -> Vec<String> {
        let mut request = InferenceRequest::default();
        if let Some(v) = header {
            request.headers.all.push((SELECTION_HEADER.into(), v.into()));
        }
        let data = Default::default();
        let cx = context_for(&request, &data);
        HeaderBasedTestingFilter.filter(&cx, candidates()).iter().map(|c| c.id().to_string()).collect()
    }

    #[test]
    fn ipv4_with_port_keeps_only_that_port() {
        assert_eq!(kept(Some("10.0.0.1:8001")), ["a2"]);
        assert_eq!(kept(Some("10.0.0.1:9999")), Vec::<String>::new());
    }

    #[test]
    fn ip_without_port_matches_any_port() {
        assert_eq!(kept(Some("10.0.0.1")), ["a", "a2"]);
    }

    #[test]
    fn ipv6_bracketed_with_and_without_port() {
        assert_eq!(kept(Some("[fd00::1]:8000")), ["v6"]);
        assert_eq!(kept(Some("[fd00::1]")), ["v6"]);
        assert_eq!(kept(Some("fd00::1")), ["v6"]);
        assert_eq!(kept(Some("[fd00::1]:1")), Vec::<String>::new());
    }

    #[test]
    fn list_keeps_header_order_and_dedups() {
        assert_eq!(kept(Some(" 10.0.0.2 , 10.0.0.1:8000,10.0.0.2:8000, 10.0.0.1")), ["b", "a", "a2"]);
    }

    #[test]
    fn missing_empty_or_garbage_header_keeps_nothing() {
        assert!(kept(None).is_empty());
        assert!(kept(Some("")).is_empty());
        assert!(kept(Some("  ")).is_empty());
        assert!(kept(Some("pod-a, 10.0.0:80, [::1, :8000, 10.0.0.9")).is_empty());
    }

    #[test]
    fn garbage_entries_are_skipped_not_fatal() {
        assert_eq!(kept(Some("nonsense,10.0.0.2")), ["b"]);
    }

    #[test]
    fn factory_rejects_parameters() {
        let spec =
            |p| PluginSpec { name: "t".into(), type_name: TYPE.into(), parameters: p, path: "plugins[0]".into() };
        assert!(build(&spec(serde_json::Value::Null), &BuildContext::default()).is_ok());
        assert!(build(&spec(serde_json::json!({"x": 1})), &BuildContext::default()).is_err());
    }

    #[test]
    fn contract() {
        super::super::contract::check(&HeaderBasedTestingFilter);
    }
}
