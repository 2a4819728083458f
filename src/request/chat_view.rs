//! The chat-template view of a chat completions body: what a chat template reads.
//!
//! [`super::openai::ParsedBody`] keeps only what routing needs (role and content per
//! message). Rendering a chat template the way vLLM does also needs the assistant
//! `tool_calls`, the tool `tool_call_id`, message `name`s, `tools`, and the request-level
//! template switches (`add_generation_prompt`, `continue_final_message`,
//! `add_special_tokens`, `chat_template_kwargs`). This module parses exactly those, from the
//! complete body bytes, into [`ChatView`]. Nested JSON the template may walk (`tools`,
//! `tool_calls`, kwargs) stays verbatim ([`RawJson`]) so key order survives into `tojson`.
//!
//! Input: body bytes (already validated by `parse_body`). Output: [`ChatView`] or the serde
//! error. Does not: normalise content for a template (see `tokenize::template`).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::openai::RawJson;

/// The fields of a chat body a chat template can see.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatView {
    /// The conversation, in order.
    pub messages: Vec<ViewMessage>,
    /// `tools` verbatim (absent or `null` -> `None`).
    pub tools: Option<RawJson>,
    /// vLLM `add_generation_prompt` (default `true`).
    pub add_generation_prompt: bool,
    /// vLLM `continue_final_message` (default `false`).
    pub continue_final_message: bool,
    /// vLLM `add_special_tokens` (default `false` for chat).
    pub add_special_tokens: bool,
    /// vLLM `chat_template_kwargs` verbatim (an object of extra template variables).
    pub chat_template_kwargs: Option<RawJson>,
    /// The request names its own `chat_template` (not supported by the in-process backend).
    pub has_request_template: bool,
}

/// One message as a template sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewMessage {
    /// `role`.
    pub role: String,
    /// `content`.
    pub content: ViewContent,
    /// `name`, when a string.
    pub name: Option<String>,
    /// Assistant `tool_calls` verbatim (`function.arguments` is still a JSON string).
    pub tool_calls: Option<RawJson>,
    /// Tool-result `tool_call_id`, when a string.
    pub tool_call_id: Option<String>,
}

/// A message's `content`.
#[derive(Clone, Debug, PartialEq)]
pub enum ViewContent {
    /// A plain string.
    Text(String),
    /// Typed parts; `text` is set for text parts.
    Parts(Vec<ViewPart>),
    /// Absent or `null`.
    None,
}

/// One content part.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewPart {
    /// The part's `type` (`text`, `image_url`, `input_audio`, ...).
    pub kind: String,
    /// The part's `text`, when present.
    pub text: Option<String>,
}

#[derive(Deserialize)]
struct RawBody {
    #[serde(default)]
    messages: Vec<RawMessage>,
    #[serde(default)]
    tools: Option<Box<RawValue>>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    continue_final_message: Option<bool>,
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<Box<RawValue>>,
    #[serde(default)]
    chat_template: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Option<RawContent>,
    #[serde(default)]
    name: Option<Box<RawValue>>,
    #[serde(default)]
    tool_calls: Option<Box<RawValue>>,
    #[serde(default)]
    tool_call_id: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawContent {
    Text(String),
    Parts(Vec<RawPart>),
}

#[derive(Deserialize)]
struct RawPart {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// A JSON string value as a Rust string; anything else is `None`.
fn as_string(raw: Option<Box<RawValue>>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// A raw value unless it is `null`.
fn non_null(raw: Option<Box<RawValue>>) -> Option<RawJson> {
    raw.filter(|r| r.get() != "null").map(RawJson)
}

/// Parses the chat-template view of a chat completions body.
///
/// Errors: the serde error when the body is not a JSON object of the expected shape.
pub fn parse_chat_view(body: &[u8]) -> Result<ChatView, serde_json::Error> {
    let raw: RawBody = serde_json::from_slice(body)?;
    let messages = raw
        .messages
        .into_iter()
        .map(|m| ViewMessage {
            role: m.role,
            content: match m.content {
                Some(RawContent::Text(t)) => ViewContent::Text(t),
                Some(RawContent::Parts(p)) => {
                    ViewContent::Parts(p.into_iter().map(|p| ViewPart { kind: p.kind, text: p.text }).collect())
                }
                None => ViewContent::None,
            },
            name: as_string(m.name),
            tool_calls: non_null(m.tool_calls),
            tool_call_id: as_string(m.tool_call_id),
        })
        .collect();
    Ok(ChatView {
        messages,
        tools: non_null(raw.tools),
        add_generation_prompt: raw.add_generation_prompt.unwrap_or(true),
        continue_final_message: raw.continue_final_message.unwrap_or(false),
        add_special_tokens: raw.add_special_tokens.unwrap_or(false),
        chat_template_kwargs: non_null(raw.chat_template_kwargs),
        has_request_template: non_null(raw.chat_template).is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_template_fields_and_defaults() {
        let body = br#"{"model":"m","tools":[{"b":1,"a":2}],"messages":[
            {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1"}]},
            {"role":"tool","tool_call_id":"c1","name":"f","content":"ok"}]}"#;
        let v = parse_chat_view(body).expect("valid");
        assert!(v.add_generation_prompt && !v.add_special_tokens && !v.continue_final_message);
        assert_eq!(v.tools.as_ref().map(RawJson::get), Some(r#"[{"b":1,"a":2}]"#));
        assert_eq!(v.messages[1].content, ViewContent::None);
        assert_eq!(v.messages[1].tool_calls.as_ref().map(RawJson::get), Some(r#"[{"id":"c1"}]"#));
        assert_eq!(v.messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(v.messages[2].name.as_deref(), Some("f"));
        let ViewContent::Parts(parts) = &v.messages[0].content else { panic!("parts") };
        assert_eq!(parts[1].kind, "image_url");
        assert_eq!(parts[1].text, None);
    }

    #[test]
    fn null_tools_and_switches() {
        let body = br#"{"messages":[],"tools":null,"add_generation_prompt":false,"add_special_tokens":true,"chat_template":"x"}"#;
        let v = parse_chat_view(body).expect("valid");
        assert!(v.tools.is_none() && !v.add_generation_prompt && v.add_special_tokens && v.has_request_template);
    }
}
