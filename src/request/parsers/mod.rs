//! Request parser selection and dispatch: which configured parser reads a request body, and
//! the per-format parsers that are not OpenAI JSON.
//!
//! Owns: [`ParserKind`] (one per registered parser plugin type) with the path suffixes each
//! claims; [`ParserSet`], the configured list with llm-d's resolution rule (longest claimed
//! path suffix wins; a parser that claims no path is the fallback and ends the list; no
//! match and no fallback = the body is not parsed); and [`ParserSet::parse`], which turns a
//! body into [`Parsed`] or a [`ParseError`] (HTTP 400, or `INVALID_ARGUMENT` for gRPC).
//!
//! Input: the request path (`:path` with the usual fallbacks) and the complete body bytes.
//! Does not: read other headers, decide the target model, or talk to the network.

mod anthropic;
mod grpc_frame;
mod sglang;
mod vertex;
mod vllm_grpc;
mod vllm_http;

pub use grpc_frame::{FrameError, frame, single_message};

use super::openai::{ApiKind, BodyError, ParsedBody, parse_body};

/// The request parser plugin types this build implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParserKind {
    /// `openai-parser`: OpenAI-compatible JSON, API kind from the path.
    OpenAi,
    /// `passthrough-parser`: never parses; claims no path (the fallback).
    Passthrough,
    /// `vllmhttp-parser`: OpenAI paths with OpenAI rules, plus vLLM's `/inference/v1/generate`
    /// (token ids).
    VllmHttp,
    /// `anthropic-parser`: the Anthropic Messages API (`messages`, `messages/count_tokens`).
    Anthropic,
    /// `vllmgrpc-parser`: vLLM gRPC `Generate` / `Embed`.
    VllmGrpc,
    /// `sglanghttp-parser`: SGLang's native `/generate`.
    SglangHttp,
    /// `vertexai-parser`: Vertex AI gRPC `ChatCompletions`, `RawPredict`, `StreamRawPredict`.
    VertexAi,
}

/// OpenAI path suffixes (without slashes), the claims of `openai-parser`.
const OPENAI_PATHS: &[&str] = &["chat/completions", "completions", "embeddings", "responses", "conversations"];

impl ParserKind {
    /// Every kind, in registration order.
    pub const ALL: [ParserKind; 7] = [
        ParserKind::OpenAi,
        ParserKind::Passthrough,
        ParserKind::VllmHttp,
        ParserKind::Anthropic,
        ParserKind::VllmGrpc,
        ParserKind::SglangHttp,
        ParserKind::VertexAi,
    ];

    /// The plugin type name.
    pub const fn type_name(self) -> &'static str {
        match self {
            ParserKind::OpenAi => "openai-parser",
            ParserKind::Passthrough => "passthrough-parser",
            ParserKind::VllmHttp => "vllmhttp-parser",
            ParserKind::Anthropic => "anthropic-parser",
            ParserKind::VllmGrpc => "vllmgrpc-parser",
            ParserKind::SglangHttp => "sglanghttp-parser",
            ParserKind::VertexAi => "vertexai-parser",
        }
    }

    /// Path suffixes this parser claims (compared without leading/trailing slashes); empty =
    /// a fallback that takes every unclaimed path.
    pub fn claims(self) -> &'static [&'static str] {
        match self {
            ParserKind::OpenAi => OPENAI_PATHS,
            ParserKind::Passthrough => &[],
            ParserKind::VllmHttp => {
                &["chat/completions", "completions", "embeddings", "responses", "conversations", "generate"]
            }
            ParserKind::Anthropic => &["messages", "messages/count_tokens"],
            ParserKind::VllmGrpc => &[vllm_grpc::GENERATE_PATH, vllm_grpc::EMBED_PATH],
            ParserKind::SglangHttp => &["generate"],
            ParserKind::VertexAi => vertex::METHODS,
        }
    }
}

/// A parsed request body.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// What the scheduler sees.
    pub body: ParsedBody,
    /// The body is OpenAI-style JSON whose top-level `model` may be rewritten in place
    /// (`x-gateway-model-name-rewrite`); false for gRPC and native bodies, which are
    /// forwarded unchanged.
    pub rewritable: bool,
    /// OpenAI-style JSON for a tokenizer that renders request bodies (vLLM `/render`), when
    /// the wire body is not that JSON (gRPC, Vertex envelope, SGLang, Anthropic); `None` = the wire
    /// body itself.
    pub tokenize_json: Option<Vec<u8>>,
}

impl Parsed {
    fn openai(body: ParsedBody) -> Self {
        Self { body, rewritable: true, tokenize_json: None }
    }
}

/// Why a body was rejected by the parser that claimed its path (-> 400).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// OpenAI-style JSON rules (also inside a Vertex AI envelope).
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The gRPC length-prefixed framing is invalid or compressed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The protobuf message does not decode.
    #[error("invalid {message}: {source}")]
    Proto {
        /// The message type.
        message: &'static str,
        /// The decoder's error.
        #[source]
        source: prost::DecodeError,
    },
    /// The body decodes but lacks what the API requires, or uses an unsupported shape.
    #[error("{0}")]
    Invalid(String),
}

/// The configured parsers, in resolution form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParserSet {
    /// Parsers that claim paths, in configured order (one per type).
    entries: Vec<ParserKind>,
    /// The first parser that claims no path; later parsers are never used.
    fallback: Option<ParserKind>,
}

impl Default for ParserSet {
    /// `openai-parser` alone: GIE's default and this build's behaviour before parsers were
    /// configurable (OpenAI rules on OpenAI paths, other paths unparsed).
    fn default() -> Self {
        Self::new([ParserKind::OpenAi])
    }
}

impl ParserSet {
    /// The set for `parsers` in configured order: duplicates of a type keep the first, and
    /// the first parser that claims no path becomes the fallback and ends the list.
    pub fn new(parsers: impl IntoIterator<Item = ParserKind>) -> Self {
        let mut entries = Vec::new();
        let mut fallback = None;
        for kind in parsers {
            if kind.claims().is_empty() {
                fallback = Some(kind);
                break;
            }
            if !entries.contains(&kind) {
                entries.push(kind);
            }
        }
        Self { entries, fallback }
    }

    /// Every parser that can be selected, in order (fallback last).
    pub fn kinds(&self) -> impl Iterator<Item = ParserKind> + '_ {
        self.entries.iter().copied().chain(self.fallback)
    }

    /// The parser for `path` (query string ignored): the longest claimed suffix wins (the
    /// earlier parser on a tie), else the fallback, else `None` (not parsed).
    pub fn resolve(&self, path: &str) -> Option<ParserKind> {
        let path = trim_path(path);
        let mut best: Option<(usize, ParserKind)> = None;
        for &kind in &self.entries {
            for suffix in kind.claims() {
                let suffix = suffix.trim_matches('/');
                if path_has_suffix(path, suffix) && best.is_none_or(|(len, _)| suffix.len() > len) {
                    best = Some((suffix.len(), kind));
                }
            }
        }
        best.map(|(_, kind)| kind).or(self.fallback)
    }

    /// Parses `body` with the parser `path` resolves to. `Ok(None)`: no parser, or the
    /// parser passes this path through unparsed (the request is still scheduled, without
    /// prompt data).
    ///
    /// Errors: [`ParseError`]; every error maps to a 400 (gRPC `INVALID_ARGUMENT`).
    pub fn parse(&self, path: &str, body: &[u8]) -> Result<Option<Parsed>, ParseError> {
        let Some(kind) = self.resolve(path) else { return Ok(None) };
        let path_only = path.split_once('?').map_or(path, |(p, _)| p);
        match kind {
            ParserKind::Passthrough => Ok(None),
            ParserKind::Anthropic => anthropic::parse(path_only, body).map(Some),
            ParserKind::OpenAi => Ok(Some(Parsed::openai(parse_body(ApiKind::from_path(path), body)?))),
            ParserKind::VllmHttp => {
                if vllm_http::is_generate(path_only) {
                    vllm_http::parse(body).map(Some)
                } else if OPENAI_PATHS.iter().any(|s| path_has_suffix(trim_path(path), s)) {
                    Ok(Some(Parsed::openai(parse_body(ApiKind::from_path(path), body)?)))
                } else {
                    Ok(None)
                }
            }
            ParserKind::VllmGrpc => vllm_grpc::parse(path_only, body),
            ParserKind::SglangHttp => sglang::parse(path_only, body).map(Some),
            ParserKind::VertexAi => vertex::parse(path_only, body),
        }
    }
}

/// The path without query string and trailing slashes.
fn trim_path(path: &str) -> &str {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    path.trim().trim_end_matches('/')
}

/// llm-d's suffix match (plain string suffix after trimming slashes).
fn path_has_suffix(path: &str, suffix: &str) -> bool {
    !suffix.is_empty() && path.ends_with(suffix)
}

/// A synthesized completions body for a tokenizer that renders JSON.
fn completions_json(model: &str, prompt: &serde_json::Value) -> Option<Vec<u8>> {
    serde_json::to_vec(&serde_json::json!({ "model": model, "prompt": prompt })).ok()
}

#[cfg(test)]
mod tests;
