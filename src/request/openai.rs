//! PLACEHOLDER (replaced by the parsers branch).
use serde_json::Value;

/// API kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    /// /v1/completions
    Completions,
    /// /v1/chat/completions
    ChatCompletions,
    /// /v1/responses
    Responses,
    /// /v1/conversations
    Conversations,
    /// /v1/embeddings
    Embeddings,
}

impl ApiKind {
    /// From path.
    pub fn from_path(path: &str) -> ApiKind {
        let path = path.split('?').next().unwrap_or(path);
        if path.ends_with("/chat/completions") {
            ApiKind::ChatCompletions
        } else if path.ends_with("/embeddings") {
            ApiKind::Embeddings
        } else if path.ends_with("/responses") {
            ApiKind::Responses
        } else {
            ApiKind::Completions
        }
    }
}

/// Parsed body.
#[derive(Clone, Debug)]
pub struct ParsedBody {
    /// Model.
    pub model: String,
    /// API.
    pub api: ApiKind,
    /// Prompt.
    pub prompt: Prompt,
    /// Salt.
    pub cache_salt: Option<String>,
    /// Stream.
    pub stream: bool,
    /// Max output tokens.
    pub max_output_tokens: Option<u64>,
}

/// Prompt.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Texts.
    Texts(Vec<String>),
    /// Token ids.
    TokenIds(Vec<Vec<u32>>),
    /// Other.
    Other(String),
}

/// Body error.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Not JSON.
    #[error("request body is not a JSON object")]
    NotJson,
    /// No model.
    #[error("model not found in request body")]
    MissingModel,
}

/// Parse.
pub fn parse_body(api: ApiKind, body: &[u8]) -> Result<ParsedBody, BodyError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| BodyError::NotJson)?;
    let obj = v.as_object().ok_or(BodyError::NotJson)?;
    let model = obj.get("model").and_then(Value::as_str).ok_or(BodyError::MissingModel)?.to_string();
    let prompt = match obj.get("prompt") {
        Some(Value::String(s)) => Prompt::Texts(vec![s.clone()]),
        Some(Value::Array(a)) if a.iter().all(Value::is_u64) => {
            Prompt::TokenIds(vec![a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect()])
        }
        _ => Prompt::Other(obj.get("messages").map(|m| m.to_string()).unwrap_or_default()),
    };
    Ok(ParsedBody {
        model,
        api,
        prompt,
        cache_salt: obj.get("cache_salt").and_then(Value::as_str).map(str::to_string),
        stream: obj.get("stream") == Some(&Value::Bool(true)),
        max_output_tokens: obj.get("max_tokens").and_then(Value::as_u64),
    })
}

/// Rewrite model.
pub fn rewrite_model(body: &[u8], new_model: &str) -> Result<Vec<u8>, BodyError> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| BodyError::NotJson)?;
    v["model"] = Value::String(new_model.to_string());
    serde_json::to_vec(&v).map_err(|_| BodyError::NotJson)
}

/// Estimate tokens.
pub fn estimate_tokens(prompt: &Prompt) -> Vec<u32> {
    match prompt {
        Prompt::TokenIds(t) => t.concat(),
        Prompt::Texts(t) => pack(t.join("").as_bytes()),
        Prompt::Other(s) => pack(s.as_bytes()),
    }
}

fn pack(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks(4).map(|c| {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(b)
    }).collect()
}
