//! `vllmhttp-parser`'s own endpoint: vLLM's tokens-in / tokens-out `POST /inference/v1/generate`
//! (the disaggregated serving API; vLLM `serve/disagg/protocol.py`).
//!
//! Reads `token_ids` (required, non-empty, each an integer in `0..=u32::MAX`; an integral
//! float such as `5.0` is accepted as llm-d's decoder does), `model` (optional: absent or
//! not a string = empty, so only the model-rewrite header names one), `stream`,
//! `sampling_params.max_tokens` and `cache_salt` (a string when present). The token ids are
//! the prompt as is, so prefix scoring uses them without a tokenizer. `features`
//! (multimodal hashes and placeholders) is not read. Only paths ending in
//! `/inference/v1/generate` are parsed; another path resolved to this parser through its
//! `generate` claim (SGLang's `/generate`) is passed through unparsed.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ParseError, Parsed};
use crate::request::openai::{ApiKind, BodyError, ParsedBody, Prompt};

/// The path suffix parsed here.
pub const GENERATE_SUFFIX: &str = "/inference/v1/generate";

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    token_ids: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sampling_params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_salt: Option<&'a RawValue>,
}

/// True for the path this module parses (query string already removed).
pub fn is_generate(path: &str) -> bool {
    path.trim().trim_end_matches('/').ends_with(GENERATE_SUFFIX)
}

/// Parses a `/inference/v1/generate` body.
///
/// Errors: [`ParseError::Body`] for JSON that is not an object, [`ParseError::Invalid`]
/// (`invalid generate request: ...`) for missing, empty or out-of-range `token_ids` and a
/// non-string `cache_salt`.
pub fn parse(body: &[u8]) -> Result<Parsed, ParseError> {
    if body.iter().copied().find(|b| !b.is_ascii_whitespace()) != Some(b'{') {
        return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => BodyError::NotObject.into(),
            Err(e) => BodyError::Json(e).into(),
        });
    }
    let wire: Wire<'_> = serde_json::from_slice(body).map_err(BodyError::Json)?;
    let invalid = |m: String| ParseError::Invalid(format!("invalid generate request: {m}"));
    let ids = match wire.token_ids.map(RawValue::get) {
        None | Some("null") => Vec::new(),
        Some(text) => {
            let values: Vec<f64> =
                serde_json::from_str(text).map_err(|_| invalid("token_ids must be an array of integers".into()))?;
            let mut ids = Vec::with_capacity(values.len());
            for (i, v) in values.into_iter().enumerate() {
                if !(0.0..=f64::from(u32::MAX)).contains(&v) || v.fract() != 0.0 {
                    return Err(invalid(format!("token_ids[{i}]: invalid value {v}")));
                }
                ids.push(v as u32);
            }
            ids
        }
    };
    if ids.is_empty() {
        return Err(invalid("must have non-empty token_ids field".into()));
    }
    let cache_salt = match wire.cache_salt.map(RawValue::get) {
        None | Some("null") => None,
        Some(text) => {
            Some(serde_json::from_str::<String>(text).map_err(|_| invalid("cache_salt must be a string".into()))?)
        }
    };
    let body = ParsedBody {
        model: wire.model.and_then(|m| serde_json::from_str(m.get()).ok()).unwrap_or_default(),
        api: ApiKind::Completions,
        prompt: Prompt::TokenIds(vec![ids]),
        cache_salt,
        stream: wire.stream.is_some_and(|s| s.get() == "true"),
        max_output_tokens: wire.sampling_params.and_then(max_tokens),
    };
    // The body's `model`, when present, may be rewritten in place like an OpenAI body's.
    let rewritable = !body.model.is_empty();
    Ok(Parsed { body, rewritable, tokenize_json: None })
}

/// `sampling_params.max_tokens` when a non-negative integer.
fn max_tokens(raw: &RawValue) -> Option<u64> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, default)]
        max_tokens: Option<&'a RawValue>,
    }
    let params: Params<'_> = serde_json::from_str(raw.get()).ok()?;
    params.max_tokens?.get().parse().ok()
}
