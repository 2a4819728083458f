//! OpenAI-style request bodies -> [`ParsedBody`].
//!
//! Owns: the API kind derived from the request path, the typed view of the body fields the
//! EPP needs (model, prompt, cache salt, streaming flag, output-token cap), the per-API
//! validation rules of GIE's `openai-parser`, and the model-name rewrite of the body sent
//! upstream.
//!
//! Input: the complete request body bytes. Output: [`ParsedBody`] or a [`BodyError`] whose
//! `Display` text is the message of the HTTP 400 reply. Unknown body fields are ignored
//! (vLLM accepts many extra sampling parameters); fields that belong to another API kind are
//! skipped without being parsed. The body is parsed in a single pass (see [`de`]).
//!
//! Does not: tokenize (see [`super::estimate`]), read headers, or decide the target model.

mod chat_scan;
mod content;
mod de;
mod message;

use std::sync::Arc;

use serde::de::DeserializeSeed;
use serde_json::value::RawValue;

/// A JSON value kept verbatim (exact bytes as sent, whitespace included).
#[derive(Clone, Debug)]
pub struct RawJson(pub(crate) Box<RawValue>);

impl RawJson {
    /// The JSON text exactly as it appeared in the body.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

/// Which OpenAI-compatible API a request targets; decides which body fields are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    /// `/v1/completions` (also the fallback for unknown paths, as in GIE).
    Completions,
    /// `/v1/chat/completions`.
    ChatCompletions,
    /// `/v1/responses`.
    Responses,
    /// `/v1/conversations`.
    Conversations,
    /// `/v1/embeddings`.
    Embeddings,
}

impl ApiKind {
    /// Derives the API kind from a request path: the query string is stripped, then the path
    /// is suffix-matched against `/conversations`, `/responses`, `/chat/completions`,
    /// `/completions`, `/embeddings` in that order; anything else is [`ApiKind::Completions`].
    pub fn from_path(path: &str) -> ApiKind {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        const SUFFIXES: [(&str, ApiKind); 5] = [
            ("/conversations", ApiKind::Conversations),
            ("/responses", ApiKind::Responses),
            ("/chat/completions", ApiKind::ChatCompletions),
            ("/completions", ApiKind::Completions),
            ("/embeddings", ApiKind::Embeddings),
        ];
        SUFFIXES.iter().find(|(suffix, _)| path.ends_with(suffix)).map_or(ApiKind::Completions, |(_, kind)| *kind)
    }

    /// A stable lower-case name, usable as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiKind::Completions => "completions",
            ApiKind::ChatCompletions => "chat_completions",
            ApiKind::Responses => "responses",
            ApiKind::Conversations => "conversations",
            ApiKind::Embeddings => "embeddings",
        }
    }
}

/// The fields of a request body the EPP uses, validated for its [`ApiKind`].
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedBody {
    /// The top-level `model` string exactly as the client sent it.
    pub model: String,
    /// The API kind the body was validated against.
    pub api: ApiKind,
    /// The prompt in its API-specific typed form.
    pub prompt: Prompt,
    /// vLLM's `cache_salt` (isolates prefix-cache entries); `None` if absent or not a string.
    pub cache_salt: Option<String>,
    /// `true` only when the body has `"stream": true` (the JSON boolean).
    pub stream: bool,
    /// The client's output cap: `max_tokens`, else `max_completion_tokens`, else
    /// `max_output_tokens`; values that are not non-negative integers are ignored.
    pub max_output_tokens: Option<u64>,
}

/// The prompt of a request, one variant per API shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Completions `prompt` given as a string (one element) or a list of strings; never empty.
    Texts(Vec<String>),
    /// Completions `prompt` given as token ids: a flat list (one sequence) or a list of lists.
    TokenIds(Vec<Vec<u32>>),
    /// Chat completions `messages` (at least one), optional `tools` and the chat-template
    /// switches; shared, so the tokenize step can hand it to a worker without copying.
    Chat(Arc<ChatPrompt>),
    /// Responses API `instructions`, `input` and `tools`.
    Responses(ResponsesPrompt),
    /// Conversations API `items` (at least one).
    Conversations(Vec<ChatMessage>),
    /// Embeddings `input` (never empty).
    Embeddings(EmbeddingsInput),
    /// No prompt data: only the envelope (model, stream) was read. Anthropic
    /// `messages/count_tokens` requests do no inference, so they must not feed prefix
    /// indexes or tokenizers.
    None,
}

/// A chat completions prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatPrompt {
    /// The conversation, in order; never empty.
    pub messages: Vec<ChatMessage>,
    /// The `tools` array exactly as sent (raw JSON text), if present and not `null`.
    pub tools: Option<RawJson>,
    /// vLLM's chat-template request fields.
    pub template: TemplateOptions,
}

/// vLLM's chat-template fields of a chat completions body (what a chat template sees
/// besides `messages` and `tools`).
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateOptions {
    /// `add_generation_prompt` (default `true`).
    pub add_generation_prompt: bool,
    /// `continue_final_message` (default `false`).
    pub continue_final_message: bool,
    /// `add_special_tokens` (default `false` for chat).
    pub add_special_tokens: bool,
    /// `chat_template_kwargs` verbatim (an object of extra template variables), if not `null`.
    pub kwargs: Option<RawJson>,
    /// A request-level `chat_template` string (overrides the model's), if given.
    pub chat_template: Option<String>,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        Self {
            add_generation_prompt: true,
            continue_final_message: false,
            add_special_tokens: false,
            kwargs: None,
            chat_template: None,
        }
    }
}

/// One chat message or Responses/Conversations input item. Fields other than these
/// (`type`, ...) are skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    /// `role` (`system`, `user`, `assistant`, `tool`, ...); empty when the item has none.
    pub role: String,
    /// `content`.
    pub content: MessageContent,
    /// `name`, `tool_calls`, `tool_call_id` (chat templates read them); `None` when the
    /// message has none of them.
    pub extras: Option<Box<MessageExtras>>,
}

/// The message fields only a chat template reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MessageExtras {
    /// `name`, when a string.
    pub name: Option<String>,
    /// Assistant `tool_calls` verbatim (`function.arguments` is still a JSON string), if not
    /// `null`.
    pub tool_calls: Option<RawJson>,
    /// Tool-result `tool_call_id`, when a string.
    pub tool_call_id: Option<String>,
}

/// A message's `content`.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageContent {
    /// A plain string.
    Text(String),
    /// A list of typed parts (text, images, audio, ...).
    Parts(Vec<ContentPart>),
    /// Absent or `null` (e.g. an assistant message carrying only tool calls).
    None,
}

/// One element of a multi-part `content` list. Media payloads are not kept: a media part
/// keeps only its identity (`media`).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentPart {
    /// The part's `type`: `text`, `image_url`, `video_url`, `input_audio`, `input_text`, ...
    pub kind: String,
    /// The part's `text`, when it has one.
    pub text: Option<String>,
    /// A media part's identity (hash of its URL or inline data) and modality; `None` for
    /// text parts and media parts without a URL or data.
    pub media: Option<crate::request::multimodal::MediaItem>,
}

/// A Responses API prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponsesPrompt {
    /// `instructions` (a system prompt), if a string.
    pub instructions: Option<String>,
    /// `input`.
    pub input: ResponsesInput,
    /// The `tools` array exactly as sent, if present and not `null`.
    pub tools: Option<RawJson>,
}

/// The Responses API `input`.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponsesInput {
    /// A single user text.
    Text(String),
    /// A list of input items (messages, function calls, ...); may be empty.
    Items(Vec<ChatMessage>),
}

/// The embeddings `input`.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbeddingsInput {
    /// A string (one element) or a list of strings.
    Texts(Vec<String>),
    /// Token ids: a flat list (one sequence) or a list of lists.
    TokenIds(Vec<Vec<u32>>),
}

/// Why a request body was rejected; the `Display` text is the HTTP 400 message.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is not syntactically valid JSON, or a known field has the wrong shape.
    #[error("invalid request body: {0}")]
    Json(#[source] serde_json::Error),
    /// The body is not UTF-8 (JSON text must be).
    #[error("request body is not valid UTF-8: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// The body is valid JSON but not an object.
    #[error("request body must be a JSON object")]
    NotObject,
    /// No top-level `model` (or `model` is `null`).
    #[error("model not found in request body")]
    ModelMissing,
    /// `model` is present but not a string.
    #[error("model must be a string")]
    ModelNotString,
    /// Chat completions without a non-empty `messages` list.
    #[error("chat completions request must contain at least one message")]
    NoMessages,
    /// Completions without a non-empty `prompt`.
    #[error("completions request must contain a non-empty prompt")]
    EmptyPrompt,
    /// Embeddings without a non-empty `input`.
    #[error("embeddings request must contain a non-empty input")]
    EmptyEmbeddingsInput,
    /// Responses without `input`.
    #[error("responses request must contain an input")]
    MissingResponsesInput,
    /// Conversations without a non-empty `items` list.
    #[error("conversations request must contain at least one item")]
    NoItems,
    /// A known field is valid JSON but of a shape this API does not accept.
    #[error("field `{field}` has an unsupported shape for this API")]
    UnsupportedShape {
        /// The top-level field name.
        field: &'static str,
    },
}

/// Parses and validates a complete request body for `api`.
///
/// Errors: see [`BodyError`]; every error maps to HTTP 400.
pub fn parse_body(api: ApiKind, body: &[u8]) -> Result<ParsedBody, BodyError> {
    parse_body_with(api, body, true)
}

/// [`parse_body`], with `model` optional when `require_model` is false (the model is then
/// empty): for JSON carried inside other envelopes (Vertex AI), where the model is named by
/// the endpoint rather than the body.
pub fn parse_body_with(api: ApiKind, body: &[u8], require_model: bool) -> Result<ParsedBody, BodyError> {
    if first_non_ws(body) != Some(b'{') {
        // Distinguish "valid JSON but not an object" from garbage for a clearer message.
        return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err(BodyError::NotObject),
            Err(e) => Err(BodyError::Json(e)),
        };
    }
    // Validate UTF-8 once for the whole body: serde_json's `from_str` then skips the
    // per-string validation `from_slice` would do (measured ~15% of a chat body parse).
    let text = body_text(body)?;
    if api == ApiKind::ChatCompletions
        && let Some(raw) = chat_scan::read_chat(text)
    {
        let parsed = raw.validate(api, require_model);
        // Fuzzing checks chat_scan's contract on every input it accepts.
        #[cfg(fuzzing)]
        assert_eq!(
            parsed.as_ref().map_err(ToString::to_string),
            serde_path(api, text, require_model).as_ref().map_err(ToString::to_string),
            "chat_scan and the serde path disagree"
        );
        return parsed;
    }
    serde_path(api, text, require_model)
}

/// Parses `text` with serde_json ([`de`]).
fn serde_path(api: ApiKind, text: &str, require_model: bool) -> Result<ParsedBody, BodyError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = de::BodySeed(api).deserialize(&mut de).map_err(BodyError::Json)?;
    de.end().map_err(BodyError::Json)?;
    raw.validate(api, require_model)
}

/// The body as text, checked with `simdutf8` (vector instructions picked at run time). std's
/// `from_utf8` leaves its word-at-a-time loop at every non-ASCII character: on chat text with
/// an accent or a dash every few lines it costs 1.8 instructions a byte against 0.5 on ASCII
/// (callgrind), and text in most other scripts is non-ASCII throughout. std's check runs again
/// only to describe an invalid body.
pub(crate) fn body_text(body: &[u8]) -> Result<&str, BodyError> {
    simdutf8::basic::from_utf8(body).or_else(|_| std::str::from_utf8(body)).map_err(BodyError::NotUtf8)
}

fn first_non_ws(body: &[u8]) -> Option<u8> {
    body.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Returns `body` with the value of every top-level `model` key replaced by `new_model`
/// (JSON-escaped). All other bytes are kept identical, so key order, spacing and number
/// formatting survive.
///
/// Errors: [`BodyError::Json`] / [`BodyError::NotObject`] for an unparsable body,
/// [`BodyError::ModelMissing`] when there is no top-level `model` key.
pub fn rewrite_model(body: &[u8], new_model: &str) -> Result<Vec<u8>, BodyError> {
    if first_non_ws(body) != Some(b'{') {
        return Err(BodyError::NotObject);
    }
    let text = body_text(body)?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let spans =
        de::ModelSpans { base: body.as_ptr() as usize }.deserialize(&mut deserializer).map_err(BodyError::Json)?;
    deserializer.end().map_err(BodyError::Json)?;
    if spans.is_empty() {
        return Err(BodyError::ModelMissing);
    }
    // Spans come from borrowed sub-slices of `body`, in order; check rather than trust.
    let in_order = spans.windows(2).all(|w| w[0].1 <= w[1].0);
    if !in_order || spans.iter().any(|&(s, e)| s > e || e > body.len()) {
        return Err(BodyError::NotObject);
    }
    let replacement = serde_json::to_string(new_model).map_err(BodyError::Json)?;
    let removed: usize = spans.iter().map(|(s, e)| e - s).sum();
    let mut out = Vec::with_capacity(body.len() - removed + spans.len() * replacement.len());
    let mut cursor = 0;
    for (start, end) in spans {
        out.extend_from_slice(&body[cursor..start]);
        out.extend_from_slice(replacement.as_bytes());
        cursor = end;
    }
    out.extend_from_slice(&body[cursor..]);
    Ok(out)
}

#[cfg(test)]
mod tests;
