//! `vllmgrpc-parser`: vLLM's gRPC engine API (`vllm.grpc.engine.VllmEngine`).
//!
//! `/vllm.grpc.engine.VllmEngine/Generate` -> a completions request: tokenized input becomes
//! a token-id prompt (used as is by the token producer and prefix scoring), text input a
//! text prompt; `stream` and `sampling_params.max_tokens` are read. `/Embed` -> an
//! embeddings request with token ids (tokenized input is required). Other methods
//! (`HealthCheck`, `Abort`, ...) are passed through unparsed. The API carries no model
//! name, so the model is empty unless the model-rewrite header names one.

use prost::Message;

use super::{ParseError, Parsed, completions_json, single_message};
use crate::proto::vllm::grpc::engine::{EmbedRequest, GenerateRequest, generate_request};
use crate::request::openai::{ApiKind, EmbeddingsInput, ParsedBody, Prompt};

/// The Generate method path.
pub const GENERATE_PATH: &str = "/vllm.grpc.engine.VllmEngine/Generate";
/// The Embed method path.
pub const EMBED_PATH: &str = "/vllm.grpc.engine.VllmEngine/Embed";

/// Parses a vLLM gRPC request body for method `path` (query string already removed).
///
/// Errors: [`ParseError::Frame`] (framing, compression), [`ParseError::Proto`] (decode),
/// [`ParseError::Invalid`] (no input).
pub fn parse(path: &str, body: &[u8]) -> Result<Option<Parsed>, ParseError> {
    match path {
        GENERATE_PATH => generate(single_message(body)?).map(Some),
        EMBED_PATH => embed(single_message(body)?).map(Some),
        _ => Ok(None),
    }
}

fn generate(message: &[u8]) -> Result<Parsed, ParseError> {
    let request =
        GenerateRequest::decode(message).map_err(|source| ParseError::Proto { message: "GenerateRequest", source })?;
    let (prompt, tokenize_json) = match request.input {
        Some(generate_request::Input::Tokenized(t)) => (Prompt::TokenIds(vec![t.input_ids]), None),
        Some(generate_request::Input::Text(text)) => {
            let json = completions_json("", &serde_json::Value::String(text.clone()));
            (Prompt::Texts(vec![text]), json)
        }
        None => return Err(ParseError::Invalid("GenerateRequest has neither tokenized nor text input".into())),
    };
    let body = ParsedBody {
        model: String::new(),
        api: ApiKind::Completions,
        prompt,
        cache_salt: None,
        stream: request.stream,
        max_output_tokens: request.sampling_params.and_then(|p| p.max_tokens).map(u64::from),
    };
    Ok(Parsed { body, rewritable: false, tokenize_json })
}

fn embed(message: &[u8]) -> Result<Parsed, ParseError> {
    let request =
        EmbedRequest::decode(message).map_err(|source| ParseError::Proto { message: "EmbedRequest", source })?;
    let Some(tokenized) = request.tokenized else {
        return Err(ParseError::Invalid("missing tokenized input in EmbedRequest".into()));
    };
    let body = ParsedBody {
        model: String::new(),
        api: ApiKind::Embeddings,
        prompt: Prompt::Embeddings(EmbeddingsInput::TokenIds(vec![tokenized.input_ids])),
        cache_salt: None,
        stream: false,
        max_output_tokens: None,
    };
    Ok(Parsed { body, rewritable: false, tokenize_json: None })
}
