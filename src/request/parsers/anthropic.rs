//! `anthropic-parser`: the Anthropic Messages API (`POST .../v1/messages`) and its token
//! counting endpoint (`POST .../v1/messages/count_tokens`).
//!
//! `/messages`: reads `model` (required), `system`, `messages` (at least one), `tools`,
//! `max_tokens`, `stream`, `cache_salt` and vLLM's `chat_template_kwargs`, validates their
//! shapes as llm-d does, and turns them into the chat prompt the OpenAI chat path produces
//! ([`convert`] follows vLLM's own Anthropic-to-chat conversion, so prefix scoring, the
//! estimate backend, the in-process chat template and the vLLM render backend all see the
//! conversation vLLM will tokenize). The body is forwarded as sent (the model-rewrite header
//! rewrites its `model`).
//!
//! `/messages/count_tokens`: only the envelope is read (a JSON object with a string `model`),
//! so the model resolves and rewrites; the request carries no prompt data ([`Prompt::None`]):
//! it does no inference, so it must not feed prefix indexes.
//!
//! Other paths resolved to this parser (a suffix that merely ends in `messages`) are 400s.

mod convert;
mod pyjson;

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ParseError, Parsed};
use crate::request::openai::{ApiKind, BodyError, ChatPrompt, ParsedBody, Prompt, RawJson, TemplateOptions};

/// The top-level fields read; everything else is ignored.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_salt: Option<&'a RawValue>,
    #[serde(borrow, default)]
    chat_template_kwargs: Option<&'a RawValue>,
}

/// Parses an Anthropic request body for `path` (query string already removed).
///
/// Errors: [`ParseError::Body`] for JSON that is not an object or lacks a string `model`,
/// [`ParseError::Invalid`] for the Messages rules (`invalid messages request: ...`) and for
/// paths that are neither endpoint.
pub fn parse(path: &str, body: &[u8]) -> Result<Parsed, ParseError> {
    let trimmed = path.trim().trim_end_matches('/');
    let count_tokens = trimmed.ends_with("/messages/count_tokens");
    if !count_tokens && !trimmed.ends_with("/messages") {
        return Err(ParseError::Invalid(format!("unsupported API endpoint: {path}")));
    }
    if body.iter().copied().find(|b| !b.is_ascii_whitespace()) != Some(b'{') {
        return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => BodyError::NotObject.into(),
            Err(e) => BodyError::Json(e).into(),
        });
    }
    let wire: Wire<'_> = serde_json::from_slice(body).map_err(BodyError::Json)?;
    let model = model(wire.model)?;
    let stream = wire.stream.is_some_and(|s| s.get() == "true");
    if count_tokens {
        let body = ParsedBody {
            model,
            api: ApiKind::ChatCompletions,
            prompt: Prompt::None,
            cache_salt: None,
            stream,
            max_output_tokens: None,
        };
        return Ok(Parsed { body, rewritable: true, tokenize_json: None });
    }
    let conversation = convert::Conversation::read(wire.system, wire.messages, wire.tools)?;
    let kwargs = wire.chat_template_kwargs.filter(|k| k.get() != "null");
    if kwargs.is_some_and(|k| !k.get().starts_with('{')) {
        return Err(invalid("chat_template_kwargs must be an object"));
    }
    let tokenize_json = conversation.render_json(&model, kwargs);
    let (messages, tools) = conversation.into_chat();
    let template = TemplateOptions { kwargs: kwargs.map(|k| RawJson(k.to_owned())), ..TemplateOptions::default() };
    let body = ParsedBody {
        model,
        api: ApiKind::ChatCompletions,
        prompt: Prompt::Chat(Arc::new(ChatPrompt { messages, tools, template })),
        cache_salt: wire.cache_salt.and_then(|s| serde_json::from_str(s.get()).ok()),
        stream,
        max_output_tokens: wire.max_tokens.and_then(|m| m.get().parse().ok()),
    };
    Ok(Parsed { body, rewritable: true, tokenize_json: Some(tokenize_json) })
}

/// The `model` string: absent or `null` and non-strings are the OpenAI parser's errors.
fn model(raw: Option<&RawValue>) -> Result<String, ParseError> {
    match raw.map(RawValue::get) {
        None | Some("null") => Err(BodyError::ModelMissing.into()),
        Some(text) => serde_json::from_str(text).map_err(|_| BodyError::ModelNotString.into()),
    }
}

/// A Messages validation error (`invalid messages request: <what>`).
fn invalid(what: impl std::fmt::Display) -> ParseError {
    ParseError::Invalid(format!("invalid messages request: {what}"))
}

#[cfg(test)]
mod tests;
