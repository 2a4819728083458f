//! The P/D routing headers the decode sidecar reads (reference section 8.2), shared by the
//! native pre-request of `disagg-profile-handler` and the deprecated `disagg-headers-handler`
//! (alias `prefill-header-handler`):
//! - any incoming `x-prefiller-host-port` is removed; when the prefill profile chose an
//!   endpoint it is set to that endpoint's `ip:port` (IPv6 bracketed);
//! - any incoming `x-encoder-hosts-ports` is removed; when the encode profile ran it is set to
//!   the comma-joined `ip:port` of all its targets.
//!
//! `disagg-headers-handler` parameters: `prefillProfile` (`prefill`), `encodeProfile`
//! (`encode`).

use std::sync::Arc;

use serde::Deserialize;

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{PluginInstance, PreRequest};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::request::headers::{ENCODER_HOSTS_PORTS, PREFILLER_HOST_PORT};

/// Type name (deprecated; the handler's own pre-request does the same).
pub const TYPE: &str = "disagg-headers-handler";
/// The v0.2 - v0.6 name of the same plugin.
pub const OLD_TYPE: &str = "prefill-header-handler";

/// Writes the headers for a result with the given profile names.
pub fn apply(result: &SchedulingResult, prefill_profile: &str, encode_profile: &str, headers: &mut HeaderEdits) {
    headers.remove(PREFILLER_HOST_PORT);
    if let Some(target) = result.profile(prefill_profile).and_then(|r| r.targets.first()) {
        headers.set(PREFILLER_HOST_PORT, target.endpoint.host_port.to_string());
    }
    headers.remove(ENCODER_HOSTS_PORTS);
    if let Some(r) = result.profile(encode_profile).filter(|r| !r.targets.is_empty()) {
        let all: Vec<&str> = r.targets.iter().map(|c| &*c.endpoint.host_port).collect();
        headers.set(ENCODER_HOSTS_PORTS, all.join(","));
    }
}

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Prefill profile name.
    pub prefill_profile: String,
    /// Encode profile name.
    pub encode_profile: String,
}

impl Default for Params {
    fn default() -> Self {
        Self { prefill_profile: "prefill".into(), encode_profile: "encode".into() }
    }
}

/// The standalone header writer.
#[derive(Debug)]
pub struct DisaggHeaders {
    prefill: String,
    encode: String,
}

/// Factory of `disagg-headers-handler` (and its alias).
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    tracing::warn!(plugin = %spec.name, "disagg-headers-handler is deprecated: disagg-profile-handler writes these headers itself");
    let hook = Arc::new(DisaggHeaders { prefill: p.prefill_profile, encode: p.encode_profile });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_pre_request(hook))
}

impl PreRequest for DisaggHeaders {
    fn pre_request(&self, _: &SchedulingContext<'_>, result: &SchedulingResult, headers: &mut HeaderEdits) {
        apply(result, &self.prefill, &self.encode, headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::model::Endpoint;
    use crate::framework::result::ProfileResult;
    use crate::test_util::{context_for, endpoint};

    fn result(with_prefill: bool) -> SchedulingResult {
        let decode = ProfileResult { targets: vec![endpoint("d").build()] };
        let mut v6 = endpoint("p").build();
        let addr = "fd00::1".parse().unwrap();
        v6.endpoint = Arc::new(Endpoint {
            address: addr,
            host_port: crate::endpoints::model::host_port(addr, 8000).into(),
            ..endpoint("p").endpoint()
        });
        let mut profiles = vec![("decode".into(), decode)];
        if with_prefill {
            profiles.push(("prefill".into(), ProfileResult { targets: vec![v6] }));
        }
        SchedulingResult::new("decode".into(), profiles)
    }

    #[test]
    fn sets_prefiller_and_strips_incoming_copies() {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let hook = DisaggHeaders { prefill: "prefill".into(), encode: "encode".into() };
        let mut h = HeaderEdits::default();
        hook.pre_request(&cx, &result(true), &mut h);
        assert_eq!(h.set, vec![(PREFILLER_HOST_PORT.to_string(), "[fd00::1]:8000".to_string())]);
        assert_eq!(h.remove, vec![ENCODER_HOSTS_PORTS.to_string()]);
        let mut h = HeaderEdits::default();
        hook.pre_request(&cx, &result(false), &mut h);
        assert!(h.set.is_empty());
        assert_eq!(h.remove, vec![PREFILLER_HOST_PORT.to_string(), ENCODER_HOSTS_PORTS.to_string()]);
    }
}
