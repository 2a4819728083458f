//! Serde visitors for the polymorphic body values: `prompt` / `input` / `items`
//! ([`RawInput`]), chat messages and their `content`.
//!
//! Each value is parsed once, straight into its final shape; a list's first element fixes
//! its element type and mixed lists are rejected.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use serde_json::value::RawValue;

use super::{ChatMessage, ContentPart, MessageContent, MessageExtras, RawJson};

/// A polymorphic `prompt` / `input` / `items` value.
pub(super) enum RawInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
    Items(Vec<ChatMessage>),
    /// `[]`: the element type is unknown.
    Empty,
}

/// One element of a list-valued [`RawInput`].
enum Elem {
    Str(String),
    Int(u32),
    Ints(Vec<u32>),
    Item(ChatMessage),
}

impl<'de> Deserialize<'de> for RawInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawInput, D::Error> {
        deserializer.deserialize_any(RawInputVisitor)
    }
}

struct RawInputVisitor;

impl<'de> Visitor<'de> for RawInputVisitor {
    type Value = RawInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a list of strings, token ids, or a list of items")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawInput, E> {
        Ok(RawInput::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<RawInput, E> {
        Ok(RawInput::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInput, A::Error> {
        let mixed = || de::Error::custom("list mixes element types");
        let Some(first) = seq.next_element::<Elem>()? else {
            return Ok(RawInput::Empty);
        };
        // The first element fixes the list's type; later elements must agree.
        Ok(match first {
            Elem::Str(s) => {
                let mut out = vec![s];
                while let Some(e) = seq.next_element::<Elem>()? {
                    let Elem::Str(s) = e else { return Err(mixed()) };
                    out.push(s);
                }
                RawInput::Texts(out)
            }
            Elem::Int(id) => {
                let mut out = vec![id];
                while let Some(e) = seq.next_element::<Elem>()? {
                    let Elem::Int(id) = e else {
                        return Err(mixed());
                    };
                    out.push(id);
                }
                RawInput::Tokens(out)
            }
            Elem::Ints(ids) => {
                let mut out = vec![ids];
                while let Some(e) = seq.next_element::<Elem>()? {
                    let Elem::Ints(ids) = e else {
                        return Err(mixed());
                    };
                    out.push(ids);
                }
                RawInput::TokenLists(out)
            }
            Elem::Item(item) => {
                let mut out = vec![item];
                while let Some(e) = seq.next_element::<Elem>()? {
                    let Elem::Item(item) = e else {
                        return Err(mixed());
                    };
                    out.push(item);
                }
                RawInput::Items(out)
            }
        })
    }
}

impl<'de> Deserialize<'de> for Elem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Elem, D::Error> {
        struct ElemVisitor;
        impl<'de> Visitor<'de> for ElemVisitor {
            type Value = Elem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a token id, a list of token ids, or an object")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Elem, E> {
                Ok(Elem::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Elem, E> {
                Ok(Elem::Str(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Elem, E> {
                u32::try_from(v).map(Elem::Int).map_err(|_| E::custom("token id out of range"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Elem, A::Error> {
                Vec::<u32>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Elem::Ints)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Elem, A::Error> {
                ChatMessage::deserialize(de::value::MapAccessDeserializer::new(map)).map(Elem::Item)
            }
        }
        deserializer.deserialize_any(ElemVisitor)
    }
}

#[derive(Deserialize)]
struct MessageRepr {
    #[serde(default)]
    role: Option<String>,
    #[serde(default = "no_content")]
    content: MessageContent,
    #[serde(default)]
    name: Option<Box<RawValue>>,
    #[serde(default)]
    tool_calls: Option<Box<RawValue>>,
    #[serde(default)]
    tool_call_id: Option<Box<RawValue>>,
}

/// A JSON string value as a Rust string; anything else is `None`.
fn as_string(raw: Option<Box<RawValue>>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

fn no_content() -> MessageContent {
    MessageContent::None
}

impl<'de> Deserialize<'de> for ChatMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ChatMessage, D::Error> {
        let repr = MessageRepr::deserialize(deserializer)?;
        let extras = MessageExtras {
            name: as_string(repr.name),
            tool_calls: repr.tool_calls.filter(|r| r.get() != "null").map(RawJson),
            tool_call_id: as_string(repr.tool_call_id),
        };
        let extras = (extras != MessageExtras::default()).then(|| Box::new(extras));
        Ok(ChatMessage { role: repr.role.unwrap_or_default(), content: repr.content, extras })
    }
}

#[derive(Deserialize)]
struct PartRepr {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MessageContent, D::Error> {
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MessageContent, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                while let Some(p) = seq.next_element::<PartRepr>()? {
                    parts.push(ContentPart { kind: p.kind.unwrap_or_default(), text: p.text });
                }
                Ok(MessageContent::Parts(parts))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}
