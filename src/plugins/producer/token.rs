//! `token-producer` (deprecated alias `tokenizer`): produces `TokenizedPrompt`. Backend
//! `estimate` (the default, llm-d semantics): token ids given in the request pass through;
//! text becomes its UTF-8 bytes zero-padded to a multiple of 4 and read as little-endian u32
//! pseudo-tokens (chat: tools JSON, then each message's role and content). Parameters:
//! `modelName` (""), `estimate` ({}), `vllm` (not available in this build: a clear error).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::plugins::registry::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::plugins::{DataProducer, PluginInstance};
use crate::request::InferenceRequest;
use crate::request::estimate::estimate_tokens;
use crate::scheduling::context::DataKey;
use crate::scheduling::data::RequestData;

/// Type name.
pub const TYPE: &str = "token-producer";
/// Deprecated name.
pub const OLD_TYPE: &str = "tokenizer";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Model whose tokenizer to use (render backends).
    pub model_name: String,
    /// The estimate backend (no settings).
    pub estimate: Option<serde_json::Value>,
    /// vLLM render backend settings.
    pub vllm: Option<serde_json::Value>,
    /// Deprecated UDS tokenizer settings.
    pub uds_tokenizer_config: Option<serde_json::Value>,
}

/// Estimates token ids.
#[derive(Debug, Default)]
pub struct EstimateTokenProducer;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if p.vllm.is_some() || p.uds_tokenizer_config.is_some() {
        return Err(BuildError::new(
            format!("{}.parameters", spec.path),
            "only the `estimate` token backend is available in this build (the vLLM render and in-process backends are tracked in the tokenizer issue)",
        ));
    }
    let producer = Arc::new(EstimateTokenProducer);
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_producer(producer))
}

impl DataProducer for EstimateTokenProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt]
    }

    fn produce(&self, request: &InferenceRequest, _: &[Candidate], data: &mut RequestData) {
        if let Some(body) = &request.body {
            data.tokens = Some(estimate_tokens(&body.prompt).into());
        }
    }
}
