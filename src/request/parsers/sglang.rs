//! `sglanghttp-parser`: SGLang's native `POST /generate`.
//!
//! Reads `input_ids` (one list of token ids, or a batch of lists) or, when absent, `text`
//! (a string or a batch of strings); `sampling_params.max_new_tokens`, `stream`, and
//! `extra_key` (SGLang's cache-isolation key, used like vLLM's `cache_salt`). Multimodal
//! inputs (`image_data`, `video_data`, `audio_data`) are rejected, as llm-d does. SGLang's
//! API carries no model name: the model is empty unless the model-rewrite header names one.
//! Only the path `/generate` is accepted; other paths resolved to this parser are 400s.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ParseError, Parsed, completions_json};
use crate::request::openai::{ApiKind, BodyError, ParsedBody, Prompt};

/// The fields read; everything else is ignored.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    input_ids: Option<&'a RawValue>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    extra_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    image_data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    video_data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    audio_data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sampling_params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Ids {
    One(Vec<u32>),
    Batch(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Batch(Vec<String>),
}

/// Parses an SGLang `/generate` body (`path` without query string).
///
/// Errors: [`ParseError::Body`] for JSON that is not an object, [`ParseError::Invalid`]
/// for the rules above.
pub fn parse(path: &str, body: &[u8]) -> Result<Parsed, ParseError> {
    let trimmed = path.trim().trim_end_matches('/');
    if trimmed != "/generate" && trimmed != "generate" {
        return Err(ParseError::Invalid(format!("unsupported path: {path}")));
    }
    if body.iter().copied().find(|b| !b.is_ascii_whitespace()) != Some(b'{') {
        return Err(BodyError::NotObject.into());
    }
    let wire: Wire<'_> = serde_json::from_slice(body).map_err(BodyError::Json)?;
    let invalid = |m: &str| ParseError::Invalid(format!("invalid generate request: {m}"));
    if [wire.image_data, wire.video_data, wire.audio_data].into_iter().any(has_media) {
        return Err(ParseError::Invalid("unsupported generate request: multimodal inputs are not supported".into()));
    }
    let cache_salt = match wire.extra_key {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<String>(raw.get())
                .map_err(|_| ParseError::Invalid("unsupported generate request: extra_key must be a string".into()))?,
        ),
    };
    let (prompt, tokenize_json) = if let Some(raw) = wire.input_ids {
        let batches = match serde_json::from_str::<Ids>(raw.get()) {
            Ok(Ids::One(ids)) => vec![ids],
            Ok(Ids::Batch(batches)) => batches,
            Err(_) => {
                return Err(invalid("input_ids must be an array of uint32 integers or arrays of uint32 integers"));
            }
        };
        if batches.is_empty() || batches.iter().any(Vec::is_empty) {
            return Err(invalid("input_ids cannot be empty"));
        }
        (Prompt::TokenIds(batches), None)
    } else if let Some(raw) = wire.text {
        let texts = match serde_json::from_str::<Texts>(raw.get()) {
            Ok(Texts::One(text)) => vec![text],
            Ok(Texts::Batch(texts)) => texts,
            Err(_) => return Err(invalid("text must be a string or an array of strings")),
        };
        if texts.is_empty() || texts.iter().any(String::is_empty) {
            return Err(invalid("text cannot be empty"));
        }
        let json = completions_json("", &serde_json::json!(texts));
        (Prompt::Texts(texts), json)
    } else {
        return Err(invalid("input_ids or text must be provided"));
    };
    let body = ParsedBody {
        model: String::new(),
        api: ApiKind::Completions,
        prompt,
        cache_salt,
        stream: wire.stream.is_some_and(|s| s.get() == "true"),
        max_output_tokens: wire.sampling_params.and_then(max_new_tokens),
    };
    Ok(Parsed { body, rewritable: false, tokenize_json })
}

/// `sampling_params.max_new_tokens` when a non-negative integer.
fn max_new_tokens(raw: &RawValue) -> Option<u64> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, default)]
        max_new_tokens: Option<&'a RawValue>,
    }
    let params: Params<'_> = serde_json::from_str(raw.get()).ok()?;
    params.max_new_tokens?.get().parse().ok()
}

/// A present, non-empty media field (anything but `null`, `""`, `[]`).
fn has_media(raw: Option<&RawValue>) -> bool {
    let Some(raw) = raw else { return false };
    match serde_json::from_str::<serde_json::Value>(raw.get()) {
        Ok(serde_json::Value::Null) => false,
        Ok(serde_json::Value::String(s)) => !s.is_empty(),
        Ok(serde_json::Value::Array(a)) => !a.is_empty(),
        _ => true,
    }
}
