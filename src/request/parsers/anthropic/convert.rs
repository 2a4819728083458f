//! Anthropic `system` / `messages` / `tools` -> the OpenAI chat conversation vLLM serves them
//! as (vLLM's `/v1/messages` converts to a chat completions request before tokenizing).
//!
//! Rules (vLLM's): the `system` text (a string, or its `text` blocks) and the text of any
//! `role: "system"` messages are concatenated into one leading system message (blocks
//! starting with `x-anthropic-billing-header` are dropped: a per-request hash that defeats
//! prefix caching). Per message: a string content is kept; blocks become parts: non-empty
//! `text` -> text part, `image` -> `image_url` part (`url` source, or a `data:` URL from a
//! base64 source), `tool_use` -> an OpenAI tool call (`arguments` is Python's `json.dumps`
//! of `input`), `tool_result` in a user message -> a `tool` message (text items joined by a
//! newline) placed before the user message, followed by a user message with its images; in
//! other roles -> a `Tool result: ...` text part. A single text part collapses to a string.
//! A user message left without content (only tool results) is dropped. `thinking`,
//! `redacted_thinking` and other block types are not part of the prompt here. Tools become
//! `{"type":"function","function":{"name","description","parameters":input_schema}}`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{invalid, pyjson};
use crate::request::multimodal::{MediaItem, Modality, part_key};
use crate::request::openai::{ChatMessage, ContentPart, MessageContent, MessageExtras, RawJson};
use crate::request::parsers::ParseError;

/// Claude Code's attribution header block (a per-request hash), left out of the system text.
const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// The converted conversation.
pub(super) struct Conversation {
    messages: Vec<Msg>,
    /// OpenAI-style `tools` JSON, when the request has a `tools` array.
    tools: Option<Box<RawValue>>,
}

/// One OpenAI-style chat message.
#[derive(Serialize)]
struct Msg {
    role: String,
    #[serde(skip_serializing_if = "Content::is_absent")]
    content: Content,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content {
    Absent,
    Text(String),
    Parts(Vec<Part>),
}

impl Content {
    fn is_absent(&self) -> bool {
        matches!(self, Content::Absent)
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Deserialize)]
struct MessageWire<'a> {
    #[serde(default)]
    role: Option<String>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// A content block (also an item of a `tool_result`'s content); fields of other block
/// types are ignored.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// An image `source`: `{"type":"url","url"}` or `{"type":"base64","media_type","data"}`.
#[derive(Deserialize)]
struct Source {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

#[derive(Deserialize)]
struct ToolWire<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    input_schema: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct ToolOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct ToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunctionOut<'a>,
}

#[derive(Serialize)]
struct CallFunctionOut<'a> {
    name: &'a str,
    arguments: String,
}

/// The body handed to a rendering tokenizer (vLLM `/v1/chat/completions/render`).
#[derive(Serialize)]
struct RenderBody<'a> {
    model: &'a str,
    messages: &'a [Msg],
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_template_kwargs: Option<&'a RawValue>,
}

/// A `content` / `system` value.
enum WireContent<'a> {
    Null,
    Text(String),
    Blocks(Vec<Block<'a>>),
}

impl Conversation {
    /// Reads and converts the three fields.
    ///
    /// Errors: no (or an empty) `messages` array, a message that is not an object with a
    /// string `role`, a `content` / `system` that is neither a string nor an array of block
    /// objects, block fields of the wrong type, `tools` not an array.
    pub(super) fn read(
        system: Option<&RawValue>,
        messages: Option<&RawValue>,
        tools: Option<&RawValue>,
    ) -> Result<Conversation, ParseError> {
        let wire: Vec<MessageWire<'_>> = match messages.map(RawValue::get) {
            None | Some("null") => Vec::new(),
            Some(text) => serde_json::from_str(text).map_err(|e| invalid(format!("messages: {e}")))?,
        };
        if wire.is_empty() {
            return Err(invalid("must have at least one message"));
        }
        let mut system_text = String::new();
        push_system_text(&mut system_text, content(system, "system")?);
        let mut out = Vec::with_capacity(wire.len() + 1);
        for (i, message) in wire.into_iter().enumerate() {
            let role = message.role.unwrap_or_default();
            let content = content(message.content, &format!("messages[{i}].content"))?;
            if role == "system" {
                push_system_text(&mut system_text, content);
                continue;
            }
            convert_message(role, content, &mut out)?;
        }
        if !system_text.is_empty() {
            let system = Msg {
                role: "system".into(),
                content: Content::Text(system_text),
                tool_calls: None,
                tool_call_id: None,
            };
            out.insert(0, system);
        }
        Ok(Conversation { messages: out, tools: convert_tools(tools)? })
    }

    /// OpenAI chat JSON for a rendering tokenizer (`model`, `messages`, `tools`,
    /// `chat_template_kwargs`).
    pub(super) fn render_json(&self, model: &str, kwargs: Option<&RawValue>) -> Vec<u8> {
        let body =
            RenderBody { model, messages: &self.messages, tools: self.tools.as_deref(), chat_template_kwargs: kwargs };
        // Serializing strings, raw JSON and plain structs cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The messages and tools in the chat prompt's types.
    pub(super) fn into_chat(self) -> (Vec<ChatMessage>, Option<RawJson>) {
        let messages = self.messages.into_iter().map(chat_message).collect();
        (messages, self.tools.map(RawJson))
    }
}

/// Parses a `content` / `system` value; `what` names it in errors.
fn content<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<WireContent<'a>, ParseError> {
    let Some(raw) = raw else { return Ok(WireContent::Null) };
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str(text).map(WireContent::Text).map_err(|e| invalid(format!("{what}: {e}"))),
        Some(b'[') => serde_json::from_str(text).map(WireContent::Blocks).map_err(|e| invalid(format!("{what}: {e}"))),
        _ if text == "null" => Ok(WireContent::Null),
        _ => Err(invalid(format!("{what} must be a string or an array of content blocks"))),
    }
}

fn push_system_text(out: &mut String, content: WireContent<'_>) {
    match content {
        WireContent::Null => {}
        WireContent::Text(text) => out.push_str(&text),
        WireContent::Blocks(blocks) => {
            for block in blocks {
                if block.kind.as_deref() == Some("text")
                    && let Some(text) = block.text.filter(|t| !t.is_empty() && !t.starts_with(BILLING_HEADER))
                {
                    out.push_str(&text);
                }
            }
        }
    }
}

/// Converts one non-system message, appending it (and any tool messages it yields) to `out`.
fn convert_message(role: String, content: WireContent<'_>, out: &mut Vec<Msg>) -> Result<(), ParseError> {
    let mut msg = Msg { role, content: Content::Absent, tool_calls: None, tool_call_id: None };
    match content {
        WireContent::Null => {}
        WireContent::Text(text) => msg.content = Content::Text(text),
        WireContent::Blocks(blocks) => {
            let mut parts = Vec::new();
            let mut calls = Vec::new();
            for block in blocks {
                match block.kind.as_deref().unwrap_or_default() {
                    "text" => parts.extend(block.text.filter(|t| !t.is_empty()).map(|text| Part::Text { text })),
                    "image" => parts.extend(block.source.as_ref().map(image_part)),
                    "tool_use" => calls.push(tool_call(&block)?),
                    "tool_result" if msg.role == "user" => user_tool_result(&block, out)?,
                    "tool_result" => {
                        parts.push(Part::Text { text: format!("Tool result: {}", result_text(&block)?.0) })
                    }
                    _ => {}
                }
            }
            if !calls.is_empty() {
                msg.tool_calls = RawValue::from_string(format!("[{}]", calls.join(","))).ok();
            }
            msg.content = match parts.len() {
                0 => Content::Absent,
                1 if matches!(parts[0], Part::Text { .. }) => match parts.pop() {
                    Some(Part::Text { text }) => Content::Text(text),
                    _ => Content::Absent,
                },
                _ => Content::Parts(parts),
            };
        }
    }
    if !(msg.role == "user" && msg.content.is_absent()) {
        out.push(msg);
    }
    Ok(())
}

fn image_part(source: &Source) -> Part {
    let url = if source.kind.as_deref() == Some("url") {
        source.url.clone().unwrap_or_default()
    } else {
        let media_type = source.media_type.as_deref().unwrap_or("image/jpeg");
        format!("data:{media_type};base64,{}", source.data.as_deref().unwrap_or_default())
    };
    Part::ImageUrl { image_url: ImageUrl { url } }
}

/// One OpenAI tool call (JSON text) for a `tool_use` block.
fn tool_call(block: &Block<'_>) -> Result<String, ParseError> {
    let arguments = match block.input.map(RawValue::get) {
        None | Some("null") => "{}".to_string(),
        Some(input) => pyjson::dumps(input).map_err(|e| invalid(format!("tool_use input: {e}")))?,
    };
    let call = ToolCallOut {
        id: block.id.as_deref().unwrap_or_default(),
        kind: "function",
        function: CallFunctionOut { name: block.name.as_deref().unwrap_or_default(), arguments },
    };
    serde_json::to_string(&call).map_err(|e| invalid(format!("tool_use: {e}")))
}

/// The text of a `tool_result` (a string, or its `text` items joined by newlines) and its
/// image URLs.
fn result_text(block: &Block<'_>) -> Result<(String, Vec<Part>), ParseError> {
    match content(block.content, "tool_result content")? {
        WireContent::Null => Ok((String::new(), Vec::new())),
        WireContent::Text(text) => Ok((text, Vec::new())),
        WireContent::Blocks(items) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for item in items {
                match item.kind.as_deref() {
                    Some("text") => texts.push(item.text.unwrap_or_default()),
                    Some("image") => images.extend(item.source.as_ref().map(image_part)),
                    _ => {}
                }
            }
            Ok((texts.join("\n"), images))
        }
    }
}

/// A user `tool_result`: a `tool` message, then a user message with its images.
fn user_tool_result(block: &Block<'_>, out: &mut Vec<Msg>) -> Result<(), ParseError> {
    let (text, images) = result_text(block)?;
    out.push(Msg {
        role: "tool".into(),
        content: Content::Text(text),
        tool_calls: None,
        tool_call_id: Some(block.tool_use_id.clone().unwrap_or_default()),
    });
    if !images.is_empty() {
        out.push(Msg { role: "user".into(), content: Content::Parts(images), tool_calls: None, tool_call_id: None });
    }
    Ok(())
}

/// Anthropic tools -> OpenAI function tools (JSON text); entries that are not objects are
/// skipped.
fn convert_tools(tools: Option<&RawValue>) -> Result<Option<Box<RawValue>>, ParseError> {
    let Some(raw) = tools.filter(|t| t.get() != "null") else { return Ok(None) };
    let entries: Vec<&RawValue> =
        serde_json::from_str(raw.get()).map_err(|_| invalid("tools must be an array of tool definitions"))?;
    let mut wire = Vec::with_capacity(entries.len());
    for entry in entries.into_iter().filter(|e| e.get().starts_with('{')) {
        let tool: ToolWire<'_> = serde_json::from_str(entry.get()).map_err(|e| invalid(format!("tools: {e}")))?;
        wire.push(tool);
    }
    let out: Vec<ToolOut<'_>> = wire
        .iter()
        .map(|t| ToolOut {
            kind: "function",
            function: FunctionOut {
                name: t.name.as_deref().unwrap_or_default(),
                description: t.description.as_deref(),
                parameters: t.input_schema.filter(|s| s.get() != "null"),
            },
        })
        .collect();
    let json = serde_json::to_string(&out).map_err(|e| invalid(format!("tools: {e}")))?;
    RawValue::from_string(json).map(Some).map_err(|e| invalid(format!("tools: {e}")))
}

/// A converted message in the chat prompt's types.
fn chat_message(msg: Msg) -> ChatMessage {
    let content = match msg.content {
        Content::Absent => MessageContent::None,
        Content::Text(text) => MessageContent::Text(text),
        Content::Parts(parts) => MessageContent::Parts(parts.into_iter().map(content_part).collect()),
    };
    let extras = MessageExtras { name: None, tool_calls: msg.tool_calls.map(RawJson), tool_call_id: msg.tool_call_id };
    let extras = (extras != MessageExtras::default()).then(|| Box::new(extras));
    ChatMessage { role: msg.role, content, extras }
}

fn content_part(part: Part) -> ContentPart {
    match part {
        Part::Text { text } => ContentPart { kind: "text".into(), text: Some(text), media: None },
        Part::ImageUrl { image_url } => ContentPart {
            kind: "image_url".into(),
            text: None,
            media: Some(MediaItem { key: part_key("image_url", &image_url.url), modality: Modality::Image, size: 1 }),
        },
    }
}
