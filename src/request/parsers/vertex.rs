//! `vertexai-parser`: Vertex AI's gRPC `PredictionService` methods that wrap an OpenAI-style
//! JSON body in a `google.api.HttpBody`.
//!
//! `.../PredictionService/ChatCompletions` -> the JSON is a chat completions body;
//! `.../PredictionService/RawPredict` and `/StreamRawPredict` -> a Responses API body (as
//! llm-d reads them). The JSON is validated with the OpenAI rules except that `model` is
//! optional (Vertex names the model by the endpoint); a `model` in the JSON is used when
//! present. Other methods pass through unparsed. The gRPC body is forwarded unchanged (no
//! model rewrite inside the envelope).

use prost::Message;

use super::{ParseError, Parsed, single_message};
use crate::proto::google::api::HttpBody;
use crate::proto::google::cloud::aiplatform::v1beta1::{
    ChatCompletionsRequest, RawPredictRequest, StreamRawPredictRequest,
};
use crate::request::openai::{ApiKind, parse_body_with};

/// Method path suffixes handled (and claimed).
pub const METHODS: &[&str] =
    &["PredictionService/ChatCompletions", "PredictionService/StreamRawPredict", "PredictionService/RawPredict"];

/// Decodes one request message and returns its `http_body`.
type DecodeFn = fn(&[u8]) -> Result<Option<HttpBody>, prost::DecodeError>;

/// Parses a Vertex AI request body for method `path` (query string already removed).
///
/// Errors: [`ParseError::Frame`], [`ParseError::Proto`], [`ParseError::Invalid`] (no
/// `http_body`), [`ParseError::Body`] (the JSON inside).
pub fn parse(path: &str, body: &[u8]) -> Result<Option<Parsed>, ParseError> {
    let path = path.trim_end_matches('/');
    let (name, api, decode): (&'static str, ApiKind, DecodeFn) = if path.ends_with("PredictionService/ChatCompletions")
    {
        ("ChatCompletionsRequest", ApiKind::ChatCompletions, |m| ChatCompletionsRequest::decode(m).map(|r| r.http_body))
    } else if path.ends_with("PredictionService/StreamRawPredict") {
        ("StreamRawPredictRequest", ApiKind::Responses, |m| StreamRawPredictRequest::decode(m).map(|r| r.http_body))
    } else if path.ends_with("PredictionService/RawPredict") {
        ("RawPredictRequest", ApiKind::Responses, |m| RawPredictRequest::decode(m).map(|r| r.http_body))
    } else {
        return Ok(None);
    };
    let message = single_message(body)?;
    let http_body = decode(message).map_err(|source| ParseError::Proto { message: name, source })?;
    let Some(http_body) = http_body else {
        return Err(ParseError::Invalid(format!("{name} has no HttpBody")));
    };
    let parsed = parse_body_with(api, &http_body.data, false)?;
    // A rendering tokenizer replaces the top-level `model`, so the JSON it gets must have one.
    let json = if parsed.model.is_empty() { with_model_key(&http_body.data) } else { http_body.data };
    Ok(Some(Parsed { body: parsed, rewritable: false, tokenize_json: Some(json) }))
}

/// `json` (a validated, non-empty object) with `"model":""` as its first key.
fn with_model_key(json: &[u8]) -> Vec<u8> {
    let Some(open) = json.iter().position(|&b| b == b'{') else { return json.to_vec() };
    let mut out = Vec::with_capacity(json.len() + 11);
    out.extend_from_slice(&json[..=open]);
    out.extend_from_slice(br#""model":"","#);
    out.extend_from_slice(&json[open + 1..]);
    out
}
