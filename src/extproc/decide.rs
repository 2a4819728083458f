//! The synchronous request decision: body (read by the configured parser for its path) ->
//! `InferenceRequest` -> candidates (subset hint applied) -> scheduler -> the header edits and
//! body to send upstream. No I/O; the stream
//! runs it inline for small bodies and on the blocking pool for large ones. `prepare` and
//! `schedule_prepared` are its two halves, for the stream to await the tokenize step
//! between them.

use std::collections::HashMap;
use std::net::IpAddr;

use prost_types::Struct;
use prost_types::value::Kind;
use rand::seq::IndexedRandom;

use super::error::ExtProcError;
use crate::endpoints::model::Candidate;
use crate::endpoints::store::EndpointStore;
use crate::framework::data::RequestData;
use crate::objectives::ObjectiveStore;
use crate::request::headers::{self, RequestHeaders, SUBSET_HINT_KEY, SUBSET_HINT_NAMESPACE};
use crate::request::openai::rewrite_model;
use crate::request::parsers::ParserSet;
use crate::request::{InferenceRequest, ServedEndpoint};
use crate::scheduling::scheduler::{Decision, Scheduler};

/// A decided request.
#[derive(Debug)]
pub struct Outcome {
    /// The request as scheduled.
    pub request: InferenceRequest,
    /// The decision.
    pub decision: Decision,
    /// The body to send upstream when it differs from the received one (model rewrite).
    pub rewritten_body: Option<Vec<u8>>,
}

/// A parsed request not yet scheduled.
#[derive(Debug)]
pub struct Prepared {
    /// The request (body parsed, model resolved).
    pub request: InferenceRequest,
    /// The body to send upstream when it differs from the received one (model rewrite).
    pub rewritten_body: Option<Vec<u8>>,
    /// OpenAI-style JSON for a rendering tokenizer when the wire body is not that JSON.
    pub tokenize_json: Option<Vec<u8>>,
    /// Phase-1 request data from `scheduling::stage::before_decision` (empty until it ran).
    pub awaited: RequestData,
}

/// Parses the request, applies the subset hint and schedules it.
pub fn decide(
    scheduler: &Scheduler,
    store: &EndpointStore,
    headers: &RequestHeaders,
    metadata: &HashMap<String, Struct>,
    body: &[u8],
    use_subset_hint: bool,
) -> Result<Outcome, ExtProcError> {
    let prepared = prepare(scheduler.parsers(), scheduler.objectives(), headers, body)?;
    schedule_prepared(scheduler, store, metadata, prepared, use_subset_hint)
}

/// Parses the body with the parser `parsers` selects for the path (none: not parsed) and
/// resolves the target model: an InferenceModelRewrite rule for the body's model (from
/// `objectives`) wins over the model-rewrite header, as the Go EPPs apply the rule last. The
/// rewrite changes the body's `model` only for JSON bodies; for gRPC and native bodies it sets
/// the target model and the body is kept.
pub fn prepare(
    parsers: &ParserSet,
    objectives: &ObjectiveStore,
    headers: &RequestHeaders,
    body: &[u8],
) -> Result<Prepared, ExtProcError> {
    let mut request = base_request(headers);
    request.body_len = body.len();
    let mut rewritten_body = None;
    let mut tokenize_json = None;
    if let Some(parsed) = parsers.parse(headers.path(), body)? {
        let model = parsed.body.model.clone();
        check_model_name(&model)?;
        let rule = objectives.rewrite(&model);
        let target = rule.as_ref().map(|r| r.target.as_str()).or_else(|| headers.model_rewrite());
        if let Some(target) = target {
            check_model_name(target)?;
        }
        request.target_model = match target {
            Some(target) if target != model => {
                if parsed.rewritable {
                    rewritten_body = Some(rewrite_model(body, target)?);
                }
                target.to_string()
            }
            _ => model.clone(),
        };
        request.incoming_model = model;
        request.body = Some(parsed.body);
        tokenize_json = parsed.tokenize_json;
    }
    Ok(Prepared { request, rewritten_body, tokenize_json, awaited: RequestData::default() })
}

/// Longest model name accepted (bytes). Real model ids (Hugging Face `org/name`, LoRA
/// adapter names) are far shorter; longer ones are refused with 400 before they reach any
/// index, label or log line.
pub const MAX_MODEL_NAME_BYTES: usize = 1024;

fn check_model_name(model: &str) -> Result<(), ExtProcError> {
    if model.len() > MAX_MODEL_NAME_BYTES {
        return Err(ExtProcError::BadRequest(format!(
            "model name is {} bytes long; at most {MAX_MODEL_NAME_BYTES} are accepted",
            model.len()
        )));
    }
    Ok(())
}

/// Applies the subset hint and schedules a prepared request.
pub fn schedule_prepared(
    scheduler: &Scheduler,
    store: &EndpointStore,
    metadata: &HashMap<String, Struct>,
    prepared: Prepared,
    use_subset_hint: bool,
) -> Result<Outcome, ExtProcError> {
    let Prepared { request, rewritten_body, awaited, .. } = prepared;
    let mut candidates = store.candidates();
    if use_subset_hint && let Some(hint) = subset_hint(metadata) {
        candidates = restrict_to_subset(candidates, &hint);
    }
    let decision = scheduler.schedule_with(&request, awaited, candidates)?;
    Ok(Outcome { request, decision, rewritten_body })
}

/// The request fields known from the headers alone.
pub fn base_request(headers: &RequestHeaders) -> InferenceRequest {
    let request_id = headers
        .get(headers::REQUEST_ID)
        .filter(|v| !v.is_empty())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
    InferenceRequest { request_id, headers: headers.clone(), ..Default::default() }
}

/// A uniformly random endpoint for body-less requests (GIE behaviour); `Internal` when the
/// pool is empty.
pub fn random_endpoint(store: &EndpointStore) -> Result<Candidate, ExtProcError> {
    store
        .candidates()
        .choose(&mut rand::rng())
        .cloned()
        .ok_or_else(|| ExtProcError::Internal("no pods available in datastore".into()))
}

/// The gateway's subset hint: `Some(list)` when the key is present (possibly empty).
pub fn subset_hint(metadata: &HashMap<String, Struct>) -> Option<Vec<String>> {
    let value = metadata.get(SUBSET_HINT_NAMESPACE)?.fields.get(SUBSET_HINT_KEY)?;
    let list = match &value.kind {
        Some(Kind::ListValue(l)) => l
            .values
            .iter()
            .filter_map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        Some(Kind::StringValue(s)) => s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect(),
        _ => Vec::new(),
    };
    Some(list)
}

/// The served endpoint reported in a response message's metadata.
pub fn served_endpoint(metadata: Option<&HashMap<String, Struct>>) -> ServedEndpoint {
    let Some(lb) = metadata.and_then(|m| m.get(headers::LB_METADATA_NAMESPACE)) else {
        return ServedEndpoint::NoLbMetadata;
    };
    match lb.fields.get(headers::DESTINATION_ENDPOINT_SERVED).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(s)) => ServedEndpoint::Endpoint(s.clone()),
        _ => ServedEndpoint::NoServedKey,
    }
}

/// Parses the address part of `ip:port`, `[v6]:port`, `ip` or `v6`.
fn hint_ip(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = entry.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    let (host, _) = entry.rsplit_once(':')?;
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// Keeps candidates whose IP is listed (ports ignored, as GIE does: every rank of a hinted
/// pod qualifies).
pub fn restrict_to_subset(candidates: Vec<Candidate>, hint: &[String]) -> Vec<Candidate> {
    let ips: Vec<IpAddr> = hint.iter().filter_map(|h| hint_ip(h)).collect();
    candidates.into_iter().filter(|c| ips.contains(&c.endpoint.address)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::endpoint;

    #[test]
    fn served_endpoint_distinguishes_missing_namespace_key_and_value() {
        use prost_types::Value;
        let lb = |fields: Vec<(&str, Value)>| {
            let fields = fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            HashMap::from([(headers::LB_METADATA_NAMESPACE.to_string(), Struct { fields })])
        };
        let s = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
        assert_eq!(served_endpoint(None), ServedEndpoint::NoLbMetadata);
        assert_eq!(served_endpoint(Some(&HashMap::new())), ServedEndpoint::NoLbMetadata);
        assert_eq!(served_endpoint(Some(&lb(vec![("other", s("x"))]))), ServedEndpoint::NoServedKey);
        let number = Value { kind: Some(Kind::NumberValue(1.0)) };
        assert_eq!(
            served_endpoint(Some(&lb(vec![(headers::DESTINATION_ENDPOINT_SERVED, number)]))),
            ServedEndpoint::NoServedKey
        );
        assert_eq!(
            served_endpoint(Some(&lb(vec![(headers::DESTINATION_ENDPOINT_SERVED, s("10.0.0.1:3000"))]))),
            ServedEndpoint::Endpoint("10.0.0.1:3000".into())
        );
    }

    #[test]
    fn subset_matches_by_ip_in_every_spelling() {
        let c = vec![endpoint("a").build(), endpoint("b").build()];
        let a_ip = c[0].endpoint.address.to_string();
        let kept = restrict_to_subset(c.clone(), &[format!("{a_ip}:9999")]);
        assert_eq!(kept.len(), 1);
        assert_eq!(&**kept[0].id(), "a");
        assert!(restrict_to_subset(c.clone(), &[]).is_empty());
        assert_eq!(restrict_to_subset(c, &[a_ip]).len(), 1);
        assert_eq!(hint_ip("[fd00::1]:8000"), "fd00::1".parse().ok());
    }
}
