//! Single-pass serde deserialization of request bodies into the types of [`super`].
//!
//! The top-level object is walked key by key ([`BodySeed`]); only the fields relevant to the
//! request's [`ApiKind`] are materialised, everything else is skipped with `IgnoredAny`.
//! Polymorphic fields (`prompt`, `input`, `items`, `content`) use the hand-written visitors
//! of [`super::content`] and [`super::message`], so a value is parsed once, with no
//! intermediate `serde_json::Value`. Chat bodies of the common shape are read by
//! [`super::chat_scan`] first; this is the path for every other body.
//! [`ModelSpans`] locates the top-level `model` value for the rewrite.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::content::RawInput;
use super::message::MessagesSeed;
use super::{
    ApiKind, BodyError, ChatMessage, ChatPrompt, EmbeddingsInput, ParsedBody, Prompt, RawJson, ResponsesInput,
    ResponsesPrompt, TemplateOptions,
};

/// The body as read, before per-API validation.
#[derive(Default)]
pub(super) struct RawBody {
    pub(super) model: ModelField,
    prompt: Option<RawInput>,
    pub(super) messages: Option<Vec<ChatMessage>>,
    input: Option<RawInput>,
    items: Option<RawInput>,
    instructions: Option<String>,
    pub(super) tools: Option<RawJson>,
    pub(super) template: TemplateOptions,
    pub(super) cache_salt: Option<String>,
    pub(super) stream: bool,
    pub(super) max_tokens: Option<u64>,
    pub(super) max_completion_tokens: Option<u64>,
    pub(super) max_output_tokens: Option<u64>,
}

/// The top-level `model` as read.
#[derive(Default)]
pub(super) enum ModelField {
    #[default]
    Missing,
    NotString,
    Str(String),
}

impl RawBody {
    /// Applies the `openai-parser` validation rules for `api`; an absent `model` is an error
    /// only when `require_model`.
    pub(super) fn validate(self, api: ApiKind, require_model: bool) -> Result<ParsedBody, BodyError> {
        let model = match self.model {
            ModelField::Missing if require_model => return Err(BodyError::ModelMissing),
            ModelField::Missing => String::new(),
            ModelField::NotString => return Err(BodyError::ModelNotString),
            ModelField::Str(model) => model,
        };
        let prompt = match api {
            ApiKind::Completions => completions_prompt(self.prompt)?,
            ApiKind::ChatCompletions => match self.messages {
                Some(messages) if !messages.is_empty() => {
                    Prompt::Chat(Arc::new(ChatPrompt { messages, tools: self.tools, template: self.template }))
                }
                _ => return Err(BodyError::NoMessages),
            },
            ApiKind::Responses => {
                let input = match self.input {
                    None => return Err(BodyError::MissingResponsesInput),
                    Some(RawInput::Text(text)) => ResponsesInput::Text(text),
                    Some(RawInput::Items(items)) => ResponsesInput::Items(items),
                    Some(RawInput::Empty) => ResponsesInput::Items(Vec::new()),
                    Some(_) => return Err(BodyError::UnsupportedShape { field: "input" }),
                };
                let instructions = self.instructions;
                Prompt::Responses(ResponsesPrompt { instructions, input, tools: self.tools })
            }
            ApiKind::Conversations => match self.items {
                Some(RawInput::Items(items)) if !items.is_empty() => Prompt::Conversations(items),
                None | Some(RawInput::Empty) => return Err(BodyError::NoItems),
                Some(_) => return Err(BodyError::UnsupportedShape { field: "items" }),
            },
            ApiKind::Embeddings => embeddings_input(self.input)?,
        };
        Ok(ParsedBody {
            model,
            api,
            prompt,
            cache_salt: self.cache_salt,
            stream: self.stream,
            max_output_tokens: self.max_tokens.or(self.max_completion_tokens).or(self.max_output_tokens),
        })
    }
}

fn completions_prompt(prompt: Option<RawInput>) -> Result<Prompt, BodyError> {
    match prompt {
        None | Some(RawInput::Empty) => Err(BodyError::EmptyPrompt),
        Some(RawInput::Text(text)) if text.is_empty() => Err(BodyError::EmptyPrompt),
        Some(RawInput::Text(text)) => Ok(Prompt::Texts(vec![text])),
        Some(RawInput::Texts(texts)) => Ok(Prompt::Texts(texts)),
        Some(RawInput::Tokens(ids)) => Ok(Prompt::TokenIds(vec![ids])),
        Some(RawInput::TokenLists(lists)) => Ok(Prompt::TokenIds(lists)),
        Some(RawInput::Items(_)) => Err(BodyError::UnsupportedShape { field: "prompt" }),
    }
}

fn embeddings_input(input: Option<RawInput>) -> Result<Prompt, BodyError> {
    let input = match input {
        None | Some(RawInput::Empty) => return Err(BodyError::EmptyEmbeddingsInput),
        Some(RawInput::Text(text)) if text.is_empty() => {
            return Err(BodyError::EmptyEmbeddingsInput);
        }
        Some(RawInput::Text(text)) => EmbeddingsInput::Texts(vec![text]),
        Some(RawInput::Texts(texts)) => EmbeddingsInput::Texts(texts),
        Some(RawInput::Tokens(ids)) => EmbeddingsInput::TokenIds(vec![ids]),
        Some(RawInput::TokenLists(lists)) => EmbeddingsInput::TokenIds(lists),
        Some(RawInput::Items(_)) => return Err(BodyError::UnsupportedShape { field: "input" }),
    };
    Ok(Prompt::Embeddings(input))
}

/// Deserializes the top-level object for one [`ApiKind`].
pub(super) struct BodySeed(pub(super) ApiKind);

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = RawBody;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawBody, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed {
    type Value = RawBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBody, A::Error> {
        use ApiKind::*;
        let api = self.0;
        let mut body = RawBody::default();
        while let Some(key) = map.next_key::<Key>()? {
            match (key, api) {
                (Key::Model, _) => {
                    let raw: &RawValue = map.next_value()?;
                    body.model = match raw.get() {
                        "null" => ModelField::Missing,
                        text => serde_json::from_str(text).map_or(ModelField::NotString, ModelField::Str),
                    };
                }
                (Key::Prompt, Completions) => body.prompt = map.next_value()?,
                (Key::Messages, ChatCompletions) => body.messages = map.next_value_seed(MessagesSeed)?,
                (Key::Input, Responses | Embeddings) => body.input = map.next_value()?,
                (Key::Items, Conversations) => body.items = map.next_value()?,
                (Key::Instructions, Responses) => body.instructions = lenient_string(&mut map)?,
                (Key::Tools, ChatCompletions | Responses) => {
                    let raw: &RawValue = map.next_value()?;
                    body.tools = (raw.get() != "null").then(|| RawJson(raw.to_owned()));
                }
                (Key::AddGenerationPrompt, ChatCompletions) => {
                    body.template.add_generation_prompt = lenient_bool(&mut map)?.unwrap_or(true)
                }
                (Key::ContinueFinalMessage, ChatCompletions) => {
                    body.template.continue_final_message = lenient_bool(&mut map)?.unwrap_or(false)
                }
                (Key::AddSpecialTokens, ChatCompletions) => {
                    body.template.add_special_tokens = lenient_bool(&mut map)?.unwrap_or(false)
                }
                (Key::ChatTemplateKwargs, ChatCompletions) => {
                    let raw: &RawValue = map.next_value()?;
                    body.template.kwargs = (raw.get() != "null").then(|| RawJson(raw.to_owned()));
                }
                (Key::ChatTemplate, ChatCompletions) => body.template.chat_template = lenient_string(&mut map)?,
                (Key::CacheSalt, _) => body.cache_salt = lenient_string(&mut map)?,
                (Key::Stream, _) => body.stream = map.next_value::<&RawValue>()?.get() == "true",
                (Key::MaxTokens, _) => body.max_tokens = lenient_u64(&mut map)?,
                (Key::MaxCompletionTokens, _) => body.max_completion_tokens = lenient_u64(&mut map)?,
                (Key::MaxOutputTokens, _) => body.max_output_tokens = lenient_u64(&mut map)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(body)
    }
}

fn lenient_string<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<String>, A::Error> {
    let raw: &RawValue = map.next_value()?;
    Ok(serde_json::from_str(raw.get()).ok())
}

/// A JSON boolean; anything else is `None` (the field's default applies).
fn lenient_bool<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<bool>, A::Error> {
    Ok(match map.next_value::<&RawValue>()?.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    })
}

fn lenient_u64<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<u64>, A::Error> {
    let raw: &RawValue = map.next_value()?;
    Ok(raw.get().parse().ok())
}

/// Top-level keys the parser knows.
enum Key {
    Model,
    Prompt,
    Messages,
    Input,
    Items,
    Instructions,
    Tools,
    AddGenerationPrompt,
    ContinueFinalMessage,
    AddSpecialTokens,
    ChatTemplateKwargs,
    ChatTemplate,
    CacheSalt,
    Stream,
    MaxTokens,
    MaxCompletionTokens,
    MaxOutputTokens,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "model" => Key::Model,
                    "prompt" => Key::Prompt,
                    "messages" => Key::Messages,
                    "input" => Key::Input,
                    "items" => Key::Items,
                    "instructions" => Key::Instructions,
                    "tools" => Key::Tools,
                    "add_generation_prompt" => Key::AddGenerationPrompt,
                    "continue_final_message" => Key::ContinueFinalMessage,
                    "add_special_tokens" => Key::AddSpecialTokens,
                    "chat_template_kwargs" => Key::ChatTemplateKwargs,
                    "chat_template" => Key::ChatTemplate,
                    "cache_salt" => Key::CacheSalt,
                    "stream" => Key::Stream,
                    "max_tokens" => Key::MaxTokens,
                    "max_completion_tokens" => Key::MaxCompletionTokens,
                    "max_output_tokens" => Key::MaxOutputTokens,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Finds the byte spans of every top-level `model` value; `base` is the body's address, so
/// a borrowed [`RawValue`]'s offset into the body is its address minus `base`.
pub(super) struct ModelSpans {
    pub(super) base: usize,
}

impl<'de> DeserializeSeed<'de> for ModelSpans {
    type Value = Vec<(usize, usize)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ModelSpans {
    type Value = Vec<(usize, usize)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut spans = Vec::with_capacity(1);
        while let Some(key) = map.next_key::<Key>()? {
            if let Key::Model = key {
                // Borrowed RawValue: a sub-slice of the input, so its address locates it.
                let raw: &RawValue = map.next_value()?;
                let start = (raw.get().as_ptr() as usize).wrapping_sub(self.base);
                spans.push((start, start + raw.get().len()));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(spans)
    }
}
