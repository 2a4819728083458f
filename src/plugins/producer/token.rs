//! `token-producer` (deprecated alias `tokenizer`): produces `TokenizedPrompt`. Exactly one
//! backend:
//!
//! * `estimate` (the default, llm-d semantics): token ids given in the request pass through;
//!   text becomes its UTF-8 bytes zero-padded to a multiple of 4 and read as little-endian
//!   u32 pseudo-tokens (chat: tools JSON, then each message's role and content).
//! * `vllm: {url: http://localhost:8000, timeout: 5s, mmTimeout: 30s}`: vLLM's render
//!   endpoints; `modelName` (required) replaces the body's `model`.
//! * `local: {models: {<model name>: <dir>}, timeout: 400ms, workers: <cores, max 4>,
//!   cacheEntries: 128, cacheBytes: 67108864}`: in-process Hugging Face tokenizer and chat
//!   template from each local model directory (`tokenizer.json`, `tokenizer_config.json`,
//!   `chat_template.jinja`). Requests for a model not listed use the `modelName` entry when
//!   set (LoRA adapters share their base model's tokenizer), else go without tokens.
//!
//! `udsTokenizerConfig` (deprecated) is rejected. For `vllm` and `local` the ids are computed
//! by the asynchronous tokenize step `scheduling::stage` awaits before the decision
//! ([`crate::tokenize::Tokenizer`], registered as the instance's `tokenize_step`), which
//! writes them into `RequestData::tokens`; `produce` does nothing more, so it does no I/O. A
//! miss leaves `TokenizedPrompt` unset.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, de_duration, decode_params};
use crate::framework::context::DataKey;
use crate::framework::data::RequestData;
use crate::framework::plugin::{DataProducer, PluginInstance};
use crate::request::InferenceRequest;
use crate::request::estimate::estimate_tokens;
use crate::tokenize::local::{CacheBounds, LocalBackend};
use crate::tokenize::pool::BlockingPool;
use crate::tokenize::render_client::RenderClient;
use crate::tokenize::{Backend, Deadlines, Tokenizer};

/// Type name.
pub const TYPE: &str = "token-producer";
/// Deprecated name.
pub const OLD_TYPE: &str = "tokenizer";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Model whose tokenizer to use (`vllm`: required, sent as `model`; `local`: fallback
    /// entry of `local.models`).
    pub model_name: String,
    /// The estimate backend (no settings).
    pub estimate: Option<serde_json::Value>,
    /// vLLM render backend settings.
    pub vllm: Option<VllmParams>,
    /// In-process backend settings.
    pub local: Option<LocalParams>,
    /// Deprecated UDS tokenizer settings (rejected).
    pub uds_tokenizer_config: Option<serde_json::Value>,
}

/// `vllm` backend settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct VllmParams {
    /// Base URL of the vLLM server (`http` only).
    pub url: String,
    /// Deadline for text requests.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Deadline for requests with media parts.
    #[serde(deserialize_with = "de_duration")]
    pub mm_timeout: Duration,
}

impl Default for VllmParams {
    fn default() -> Self {
        Self {
            url: "http://localhost:8000".into(),
            timeout: Duration::from_secs(5),
            mm_timeout: Duration::from_secs(30),
        }
    }
}

/// `local` backend settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalParams {
    /// Model name -> directory with `tokenizer.json` (and optionally `tokenizer_config.json`,
    /// `chat_template.jinja`).
    pub models: BTreeMap<String, PathBuf>,
    /// Deadline per request, queueing included.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Tokenizations running at once (0 = available cores, at most 4).
    pub workers: usize,
    /// Prompts kept per model for follow-up turns (>= 1).
    pub cache_entries: usize,
    /// Byte budget of that cache per model (text + ids).
    pub cache_bytes: usize,
}

impl Default for LocalParams {
    fn default() -> Self {
        Self {
            models: BTreeMap::new(),
            timeout: Duration::from_millis(400),
            workers: 0,
            cache_entries: 128,
            cache_bytes: 64 << 20,
        }
    }
}

/// Produces `TokenizedPrompt`.
#[derive(Debug)]
pub enum TokenProducer {
    /// Estimated ids computed inline.
    Estimate,
    /// Ids computed by the asynchronous tokenize step (`PluginInstance::tokenize_step`),
    /// which writes them into `RequestData::tokens` before the scheduler runs.
    Tokenizer,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |field: &str| format!("{}.parameters{field}", spec.path);
    let chosen = [p.estimate.is_some(), p.vllm.is_some(), p.local.is_some(), p.uds_tokenizer_config.is_some()];
    if chosen.iter().filter(|c| **c).count() > 1 {
        return Err(BuildError::new(at(""), "set exactly one backend: `estimate`, `vllm` or `local`"));
    }
    if p.uds_tokenizer_config.is_some() {
        return Err(BuildError::new(
            at(".udsTokenizerConfig"),
            "the UDS tokenizer is not supported; use the `vllm` or `local` backend",
        ));
    }
    let tokenizer = if let Some(v) = &p.vllm {
        Some(build_vllm(&p, v, cx, &at)?)
    } else if let Some(l) = &p.local {
        Some(build_local(&p, l, cx, &at)?)
    } else {
        None
    };
    let instance = PluginInstance::new(spec.name.clone(), TYPE);
    Ok(match tokenizer {
        Some(t) => instance.with_producer(Arc::new(TokenProducer::Tokenizer)).with_tokenize_step(Arc::new(t)),
        None => instance.with_producer(Arc::new(TokenProducer::Estimate)),
    })
}

fn build_vllm(
    p: &Params,
    v: &VllmParams,
    cx: &BuildContext,
    at: &dyn Fn(&str) -> String,
) -> Result<Tokenizer, BuildError> {
    if p.model_name.is_empty() {
        return Err(BuildError::new(at(".modelName"), "required with the `vllm` backend"));
    }
    let valid = v.url.parse::<hyper::Uri>().ok().is_some_and(|u| u.scheme_str() == Some("http") && u.host().is_some());
    if !valid {
        return Err(BuildError::new(at(".vllm.url"), format!("{:?} is not an http://host[:port] URL", v.url)));
    }
    if v.timeout.is_zero() || v.mm_timeout.is_zero() {
        return Err(BuildError::new(at(".vllm"), "timeout and mmTimeout must be positive"));
    }
    let client = RenderClient::new(&v.url, &p.model_name, v.timeout);
    Ok(Tokenizer::new(
        Backend::Vllm(Box::new(client)),
        Deadlines { text: v.timeout, multimodal: v.mm_timeout },
        cx.metrics.tokenize.clone(),
    ))
}

fn build_local(
    p: &Params,
    l: &LocalParams,
    cx: &BuildContext,
    at: &dyn Fn(&str) -> String,
) -> Result<Tokenizer, BuildError> {
    if l.models.is_empty() {
        return Err(BuildError::new(at(".local.models"), "name at least one model directory"));
    }
    if !p.model_name.is_empty() && !l.models.contains_key(&p.model_name) {
        return Err(BuildError::new(at(".modelName"), format!("{:?} is not a key of local.models", p.model_name)));
    }
    if l.timeout.is_zero() {
        return Err(BuildError::new(at(".local.timeout"), "must be positive"));
    }
    let entries =
        NonZeroUsize::new(l.cache_entries).ok_or_else(|| BuildError::new(at(".local.cacheEntries"), "must be >= 1"))?;
    let workers = NonZeroUsize::new(l.workers).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(NonZeroUsize::MIN, |n| n.min(NonZeroUsize::MIN.saturating_add(3)))
    });
    let fallback = (!p.model_name.is_empty()).then_some(p.model_name.as_str());
    let models = LocalBackend::load(&l.models, fallback, CacheBounds { entries, bytes: l.cache_bytes })
        .map_err(|(name, e)| BuildError::new(at(&format!(".local.models[{name}]")), error_chain(&e)))?;
    let backend = Backend::Local { models: Arc::new(models), pool: BlockingPool::new(workers) };
    Ok(Tokenizer::new(backend, Deadlines { text: l.timeout, multimodal: l.timeout }, cx.metrics.tokenize.clone()))
}

/// `error: cause: cause` (BuildError carries text only).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl DataProducer for TokenProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt]
    }

    fn produce(&self, request: &InferenceRequest, _: &[Candidate], data: &mut RequestData) {
        match self {
            TokenProducer::Estimate => {
                if let Some(body) = &request.body {
                    data.tokens = Some(estimate_tokens(&body.prompt));
                }
            }
            // Phase 1 (`scheduling::stage`) already wrote the ids, or the step missed.
            TokenProducer::Tokenizer => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(params: serde_json::Value) -> PluginSpec {
        PluginSpec { name: "tok".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() }
    }

    fn fixture(family: &str) -> String {
        format!("{}/tests/fixtures/tokenizers/{family}", env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn missing_tokenizer_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let params = serde_json::json!({"local": {"models": {"m": dir.path()}}});
        let err = build(&spec(params), &BuildContext::default()).expect_err("no tokenizer.json");
        assert_eq!(err.path, "plugins[0].parameters.local.models[m]");
        assert!(err.message.contains(&dir.path().join("tokenizer.json").display().to_string()), "{}", err.message);
    }

    #[test]
    fn backend_choice_is_validated() {
        let cx = BuildContext::default();
        let err = build(&spec(serde_json::json!({"estimate": {}, "vllm": {}})), &cx).expect_err("two backends");
        assert_eq!(err.path, "plugins[0].parameters");
        let err = build(&spec(serde_json::json!({"vllm": {}})), &cx).expect_err("no model");
        assert_eq!(err.path, "plugins[0].parameters.modelName");
        let err =
            build(&spec(serde_json::json!({"modelName": "m", "vllm": {"url": "ftp://x"}})), &cx).expect_err("bad url");
        assert_eq!(err.path, "plugins[0].parameters.vllm.url");
        let err =
            build(&spec(serde_json::json!({"modelName": "x", "local": {"models": {"m": fixture("llama3")}}})), &cx)
                .expect_err("unknown fallback");
        assert_eq!(err.path, "plugins[0].parameters.modelName");
        let err = build(&spec(serde_json::json!({"udsTokenizerConfig": {}})), &cx).expect_err("uds");
        assert_eq!(err.path, "plugins[0].parameters.udsTokenizerConfig");
    }

    #[test]
    fn backends_build_and_expose_a_tokenizer() {
        let cx = BuildContext::default();
        let vllm = build(
            &spec(serde_json::json!({"modelName": "m", "vllm": {"url": "http://127.0.0.1:1", "timeout": "50ms"}})),
            &cx,
        )
        .expect("vllm");
        assert!(vllm.tokenize_step.is_some() && vllm.producer.is_some());
        let local =
            build(&spec(serde_json::json!({"local": {"models": {"m": fixture("mistral")}}})), &cx).expect("local");
        assert!(local.tokenize_step.is_some() && local.producer.is_some());
        let est = build(&spec(serde_json::Value::Null), &cx).expect("estimate");
        assert!(est.tokenize_step.is_none() && est.producer.is_some());
    }

    #[test]
    fn estimate_passes_request_token_ids_through() {
        let est = build(&spec(serde_json::Value::Null), &BuildContext::default()).expect("estimate");
        let producer = est.producer.expect("producer");
        let request = crate::test_util::token_request("m", &[5, 6]);
        let candidates = vec![crate::test_util::endpoint("a").running(2).build()];
        let mut data = RequestData::default();
        producer.produce(&request, &candidates, &mut data);
        assert_eq!(data.tokens.as_deref(), Some(&[5, 6][..]));
        assert_eq!(candidates[0].endpoint.id, crate::test_util::endpoint("a").endpoint().id, "candidates untouched");
    }

    #[test]
    fn produce_keeps_the_tokenize_steps_ids() {
        let cx = BuildContext::default();
        let local =
            build(&spec(serde_json::json!({"local": {"models": {"m": fixture("mistral")}}})), &cx).expect("local");
        let producer = local.producer.expect("producer");
        let request = crate::test_util::chat_request("m", &["hi"]);
        let mut data = RequestData::default();
        producer.produce(&request, &[], &mut data);
        assert!(data.tokens.is_none(), "a miss leaves TokenizedPrompt unset");
        data.tokens = Some(vec![1, 2, 3].into());
        producer.produce(&request, &[], &mut data);
        assert_eq!(data.tokens.as_deref(), Some(&[1, 2, 3][..]), "phase-1 ids are left as they are");
    }
}
