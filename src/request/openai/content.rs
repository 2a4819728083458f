//! Serde visitors for the polymorphic body values: `prompt` / `input` / `items`
//! ([`RawInput`]) and the parts of a multi-part message `content` (chat messages themselves
//! are read by [`super::message`]).
//!
//! Each value is parsed once, straight into its final shape; a list's first element fixes
//! its element type and mixed lists are rejected.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{ChatMessage, ContentPart, MessageContent};
use crate::request::multimodal::{MediaItem, part_key, part_key_of, part_modality};

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

/// One content part as read (by serde here, or by [`super::chat_scan`]).
#[derive(Deserialize, Default)]
pub(super) struct PartRepr<'a> {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default, borrow)]
    pub(super) image_url: MediaValue<'a>,
    #[serde(default, borrow)]
    pub(super) video_url: MediaValue<'a>,
    #[serde(default, borrow)]
    pub(super) audio_url: MediaValue<'a>,
    #[serde(default, borrow)]
    pub(super) input_audio: MediaValue<'a>,
}

impl PartRepr<'_> {
    /// The identity of a media part: kind prefix + URL (or `format:data` for inline audio).
    pub(super) fn media(&self) -> Option<MediaItem> {
        let kind = self.kind.as_deref()?;
        let modality = part_modality(kind)?;
        let key = match kind {
            "image_url" | "input_image" => part_key("image_url", self.image_url.url.as_deref()?),
            "video_url" => part_key("video_url", self.video_url.url.as_deref()?),
            "audio_url" => part_key("audio_url", self.audio_url.url.as_deref()?),
            _ => {
                let a = &self.input_audio;
                let data = a.data.as_deref()?;
                part_key_of("input_audio", &[a.format.as_deref().unwrap_or(""), ":", data])
            }
        };
        Some(MediaItem { key, modality, size: 1 })
    }
}

/// A media field of a content part: a URL string, or an object with `url` (images, video,
/// audio URLs) or `data` + `format` (`input_audio`). Strings are borrowed from the body when
/// possible (data URLs can be megabytes). Any other JSON value is ignored, as before media
/// identity was read, so a malformed media part never fails the body.
#[derive(Default)]
pub(super) struct MediaValue<'a> {
    pub(super) url: Option<Cow<'a, str>>,
    pub(super) data: Option<Cow<'a, str>>,
    pub(super) format: Option<Cow<'a, str>>,
}

/// A string borrowed from the body when it has no escapes.
struct CowStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Cow::<'de, str>::deserialize(deserializer).map(CowStr)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MediaValue<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MediaValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a media URL or object")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MediaValue { url: Some(Cow::Borrowed(v)), ..Default::default() })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MediaValue { url: Some(Cow::Owned(v.to_owned())), ..Default::default() })
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(MediaValue { url: Some(Cow::Owned(v)), ..Default::default() })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = MediaValue::default();
                while let Some(key) = map.next_key::<CowStr<'de>>()? {
                    let slot = match &*key.0 {
                        "url" => &mut out.url,
                        "data" => &mut out.data,
                        "format" => &mut out.format,
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    // A non-string value is ignored rather than rejected.
                    *slot = map.next_value::<MaybeStr<'de>>()?.0;
                }
                Ok(out)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(MediaValue::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MediaValue::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MediaValue::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MediaValue::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MediaValue::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MediaValue::default())
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A string value, or `None` for any other JSON value.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match MediaValue::deserialize(deserializer)? {
            MediaValue { url: Some(s), .. } => Ok(MaybeStr(Some(s))),
            _ => Ok(MaybeStr(None)),
        }
    }
}

/// A multi-part `content` list: each part's type and text, and a media part's identity.
pub(super) fn content_parts<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<MessageContent, A::Error> {
    let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(2));
    while let Some(p) = seq.next_element::<PartRepr>()? {
        let media = p.media();
        parts.push(ContentPart { kind: p.kind.unwrap_or_default(), text: p.text, media });
    }
    Ok(MessageContent::Parts(parts))
}
