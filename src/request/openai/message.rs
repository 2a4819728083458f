//! Chat messages (`messages`, and Responses / Conversations items): a hand-written visitor per
//! message (the serde path; chat bodies of the common shape are read by [`super::chat_scan`]).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::content::content_parts;
use super::{ChatMessage, MessageContent, MessageExtras, RawJson};

/// Reads a `messages` value (`null` or a list of messages).
pub(super) struct MessagesSeed;

impl<'de> DeserializeSeed<'de> for MessagesSeed {
    type Value = Option<Vec<ChatMessage>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MessagesSeed {
    type Value = Option<Vec<ChatMessage>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of chat messages")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut messages = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(message) = seq.next_element::<ChatMessage>()? {
            messages.push(message);
        }
        Ok(Some(messages))
    }
}

/// Reads one message object: `role`, `content` and the template-only fields; other keys are
/// skipped, a repeated known key is an error.
struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = ChatMessage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chat message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChatMessage, A::Error> {
        let mut role: Option<Option<String>> = None;
        let mut content: Option<MessageContent> = None;
        let mut name: Option<Box<RawValue>> = None;
        let mut tool_calls: Option<Box<RawValue>> = None;
        let mut tool_call_id: Option<Box<RawValue>> = None;
        while let Some(key) = map.next_key::<MessageKey>()? {
            match key {
                MessageKey::Role => once(&mut role, "role", || map.next_value())?,
                MessageKey::Content => once(&mut content, "content", || map.next_value())?,
                MessageKey::Name => once(&mut name, "name", || map.next_value())?,
                MessageKey::ToolCalls => once(&mut tool_calls, "tool_calls", || map.next_value())?,
                MessageKey::ToolCallId => once(&mut tool_call_id, "tool_call_id", || map.next_value())?,
                MessageKey::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let extras = MessageExtras {
            name: as_string(name),
            tool_calls: tool_calls.filter(|r| r.get() != "null").map(RawJson),
            tool_call_id: as_string(tool_call_id),
        };
        let extras = (extras != MessageExtras::default()).then(|| Box::new(extras));
        Ok(ChatMessage {
            role: role.flatten().unwrap_or_default(),
            content: content.unwrap_or(MessageContent::None),
            extras,
        })
    }
}

/// The keys of a message object [`MessageSeed`] reads (matched on the borrowed key, no copy).
enum MessageKey {
    Role,
    Content,
    Name,
    ToolCalls,
    ToolCallId,
    Other,
}

impl<'de> Deserialize<'de> for MessageKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MessageKey, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = MessageKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<MessageKey, E> {
                Ok(match key {
                    "role" => MessageKey::Role,
                    "content" => MessageKey::Content,
                    "name" => MessageKey::Name,
                    "tool_calls" => MessageKey::ToolCalls,
                    "tool_call_id" => MessageKey::ToolCallId,
                    _ => MessageKey::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Stores the value `read` returns in `slot`; a second occurrence of `field` is an error.
fn once<T, E: de::Error>(
    slot: &mut Option<T>,
    field: &'static str,
    read: impl FnOnce() -> Result<T, E>,
) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(read()?);
    Ok(())
}

/// A JSON string value as a Rust string; anything else is `None`.
fn as_string(raw: Option<Box<RawValue>>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

impl<'de> Deserialize<'de> for ChatMessage {
    /// Chat messages and Responses / Conversations items.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ChatMessage, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

impl<'de> Deserialize<'de> for MessageContent {
    /// A message's `content`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MessageContent, D::Error> {
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// Builds a [`MessageContent`]: a string, a list of parts, or `null`.
struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = MessageContent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a list of content parts, or null")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageContent, E> {
        Ok(MessageContent::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<MessageContent, E> {
        Ok(MessageContent::Text(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<MessageContent, E> {
        Ok(MessageContent::None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MessageContent, A::Error> {
        content_parts(seq)
    }
}
