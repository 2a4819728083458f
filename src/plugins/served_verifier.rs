//! `destination-endpoint-served-verifier` (GIE conformance test plugin): on the response
//! headers, copies the endpoint the gateway reports as having served the request
//! (`envoy.lb` metadata key `x-gateway-destination-endpoint-served` on the response-headers
//! message) into response header `x-conformance-test-served-endpoint`, so the conformance
//! suite can compare it with the endpoint it asked for. When the report is missing the
//! header says why: `fail: missing envoy lb metadata` or
//! `fail: missing destination endpoint served metadata`.
//!
//! No parameters. Requests that were never scheduled get no header.

use std::sync::Arc;

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::{PluginInstance, ResponseHook};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::plugins::producer::passive::NoParams;
use crate::request::usage::Usage;
use crate::request::{InferenceRequest, ServedEndpoint};

/// Type name.
pub const TYPE: &str = "destination-endpoint-served-verifier";
/// Response header written.
pub const SERVED_HEADER: &str = "x-conformance-test-served-endpoint";
/// Value when the response carried no `envoy.lb` metadata.
pub const MISSING_LB: &str = "fail: missing envoy lb metadata";
/// Value when `envoy.lb` lacked the served key.
pub const MISSING_SERVED: &str = "fail: missing destination endpoint served metadata";

/// The response hook.
#[derive(Debug, Default)]
pub struct ServedVerifier;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_response(Arc::new(ServedVerifier)))
}

/// The header value for a served-endpoint report.
pub fn header_value(served: &ServedEndpoint) -> String {
    match served {
        ServedEndpoint::NoLbMetadata => MISSING_LB.into(),
        ServedEndpoint::NoServedKey => MISSING_SERVED.into(),
        ServedEndpoint::Endpoint(e) => e.clone(),
    }
}

impl ResponseHook for ServedVerifier {
    fn edit_response_headers(&self, request: &InferenceRequest, _: &SchedulingResult, edits: &mut HeaderEdits) {
        edits.set(SERVED_HEADER, header_value(&request.served));
    }

    fn on_response_complete(&self, _: &InferenceRequest, _: &SchedulingResult, _: Option<&Usage>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(served: ServedEndpoint) -> Vec<(String, String)> {
        let request = InferenceRequest { served, ..Default::default() };
        let mut edits = HeaderEdits::default();
        let result = SchedulingResult { primary_profile: "p".into(), profiles: Vec::new(), destination_port: None };
        ServedVerifier.edit_response_headers(&request, &result, &mut edits);
        edits.set
    }

    #[test]
    fn copies_the_served_endpoint() {
        assert_eq!(
            written(ServedEndpoint::Endpoint("10.0.0.7:3000".into())),
            [(SERVED_HEADER.into(), "10.0.0.7:3000".into())]
        );
    }

    #[test]
    fn reports_missing_metadata() {
        assert_eq!(written(ServedEndpoint::NoLbMetadata), [(SERVED_HEADER.into(), MISSING_LB.into())]);
        assert_eq!(written(ServedEndpoint::NoServedKey), [(SERVED_HEADER.into(), MISSING_SERVED.into())]);
    }

    #[test]
    fn factory_takes_no_parameters() {
        let spec =
            |p| PluginSpec { name: "v".into(), type_name: TYPE.into(), parameters: p, path: "plugins[0]".into() };
        let inst = build(&spec(serde_json::Value::Null), &BuildContext::default());
        assert!(inst.is_ok_and(|i| i.roles().to_string().contains("response")));
        assert!(build(&spec(serde_json::json!({"a": 1})), &BuildContext::default()).is_err());
    }
}
