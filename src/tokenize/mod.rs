//! Real token ids for text and chat prompts, computed *before* the synchronous decision.
//!
//! Data flow:
//! ```text
//! scheduling::stage --ParsedBody + body bytes--> Tokenizer::tokenize (async, with deadline)
//!     local: BlockingPool -> LocalModel (tokenizer.json + chat template, PrefixCache)
//!     vllm:  RenderClient -> POST {url}/v1/{chat/}completions/render
//!   --Option<Tokenized>--> RequestData::tokens (+ mm_items), phase 1; the scheduler's
//!   producers read them inside Scheduler::schedule (no I/O there)
//! ```
//! Scheduling plugins stay synchronous and I/O-free: the stage before the decision awaits
//! [`Tokenizer::tokenize`] between parsing and scheduling. CPU work runs on a bounded blocking pool, HTTP on the
//! async runtime; both under a deadline (`timeout`, or `mmTimeout` for requests with media
//! parts). A miss (deadline, error, unsupported prompt, unknown model) returns `None`, is
//! counted in `llm_d_epp_tokenize_total{outcome}`, and the request is still routed, only
//! without token-based prefix information. Token ids given in the request pass through.
//!
//! Modules: [`local`] (in-process tokenizer and model registry), [`template`] (chat
//! templates), [`cache`] (prefix cache for follow-up turns), [`render_client`] (vLLM),
//! [`pool`] (bounded blocking pool), [`encoder`] and [`pretok`] (fast encoding), [`metrics`], [`clock`] (`strftime_now`).

pub mod cache;
pub mod clock;
pub mod encoder;
pub mod local;
pub mod metrics;
pub mod pool;
pub mod pretok;
pub mod render_client;
pub mod template;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;

use self::local::{CacheUse, EncodeError, LocalBackend};
use self::metrics::{BackendLabel, Outcome, TokenizeMetrics};
use self::pool::{BlockingPool, PoolError};
use self::render_client::{RenderClient, RenderError};
use crate::request::multimodal::MediaItem;
use crate::request::openai::{ApiKind, EmbeddingsInput, MessageContent, ParsedBody, Prompt};

/// Why a tokenize step failed (logged at debug, counted as `error`).
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// In-process encoding failed.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The render call failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The pool failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
}

/// Where token ids come from.
#[derive(Debug)]
pub enum Backend {
    /// In-process tokenizers, run on a bounded pool.
    Local {
        /// Loaded models.
        models: Arc<LocalBackend>,
        /// The pool.
        pool: BlockingPool,
    },
    /// vLLM render endpoints (boxed: the client is much larger than the local variant).
    Vllm(Box<RenderClient>),
}

/// What one tokenize step produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Tokenized {
    /// Token ids.
    pub ids: Arc<[u32]>,
    /// Multimodal items with their encoder output sizes, when the backend reported any.
    pub media: Option<Arc<[MediaItem]>>,
}

/// Deadlines of one tokenize step.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Text-only requests.
    pub text: Duration,
    /// Requests with media content parts.
    pub multimodal: Duration,
}

/// The tokenize step shared by every stream (immutable; cheap to call concurrently).
#[derive(Debug)]
pub struct Tokenizer {
    backend: Backend,
    deadlines: Deadlines,
    metrics: TokenizeMetrics,
}

enum Miss {
    Unsupported,
    UnknownModel,
    Failed(TokenizeError),
}

impl Tokenizer {
    /// A tokenize step over `backend`.
    pub fn new(backend: Backend, deadlines: Deadlines, metrics: TokenizeMetrics) -> Self {
        Self { backend, deadlines, metrics }
    }

    /// The metric handles.
    pub fn metrics(&self) -> &TokenizeMetrics {
        &self.metrics
    }

    fn label(&self) -> BackendLabel {
        match self.backend {
            Backend::Local { .. } => BackendLabel::Local,
            Backend::Vllm(_) => BackendLabel::Vllm,
        }
    }

    /// Token ids of the request for `model` (the target model after any rewrite), or `None`
    /// on a miss (counted; the request is routed without tokens). `raw` is the complete body.
    pub async fn tokenize(&self, model: &str, body: &ParsedBody, raw: Bytes) -> Option<Arc<[u32]>> {
        self.tokenize_full(model, body, raw).await.map(|t| t.ids)
    }

    /// Like [`Tokenizer::tokenize`], with the multimodal items the backend reported (vLLM
    /// render `features`; the local backend reports none).
    pub async fn tokenize_full(&self, model: &str, body: &ParsedBody, raw: Bytes) -> Option<Tokenized> {
        if matches!(body.prompt, Prompt::None) {
            // Nothing to tokenize (Anthropic `count_tokens`); not a miss.
            return None;
        }
        let label = self.label();
        if let Prompt::TokenIds(seqs) | Prompt::Embeddings(EmbeddingsInput::TokenIds(seqs)) = &body.prompt {
            self.metrics.outcome(label, Outcome::Passthrough);
            return Some(Tokenized { ids: seqs.concat().into(), media: None });
        }
        let deadline = if has_media(&body.prompt) { self.deadlines.multimodal } else { self.deadlines.text };
        let started = Instant::now();
        let result = tokio::time::timeout(deadline, self.run(model, body, raw)).await;
        let outcome = match result {
            Ok(Ok(tokenized)) => {
                self.metrics.duration.with_label_values(&[label.as_str()]).observe(started.elapsed().as_secs_f64());
                self.metrics.outcome(label, Outcome::Ok);
                return Some(tokenized);
            }
            Err(_) => Outcome::Timeout,
            Ok(Err(Miss::Unsupported)) => Outcome::Unsupported,
            Ok(Err(Miss::UnknownModel)) => Outcome::UnknownModel,
            Ok(Err(Miss::Failed(error))) => {
                debug!(model, error = &error as &dyn std::error::Error, "Tokenize failed");
                Outcome::Error
            }
        };
        debug!(model, outcome = outcome.as_str(), "Routing without tokens");
        self.metrics.outcome(label, outcome);
        None
    }

    async fn run(&self, model: &str, body: &ParsedBody, raw: Bytes) -> Result<Tokenized, Miss> {
        match &self.backend {
            Backend::Vllm(client) => match body.api {
                ApiKind::Completions | ApiKind::ChatCompletions => {
                    let out = client.render(body.api, &raw).await.map_err(|e| Miss::Failed(e.into()))?;
                    let media = (!out.media.is_empty()).then(|| Arc::from(out.media));
                    Ok(Tokenized { ids: out.ids.into(), media })
                }
                _ => Err(Miss::Unsupported),
            },
            Backend::Local { models, pool } => {
                let m = models.model(model).ok_or(Miss::UnknownModel)?.clone();
                let job = match &body.prompt {
                    Prompt::Texts(texts) | Prompt::Embeddings(EmbeddingsInput::Texts(texts)) => {
                        let texts = texts.clone();
                        pool.run(move || m.encode_texts(&texts).map(|ids| (Arc::from(ids), CacheUse::Bypass))).await
                    }
                    Prompt::Chat(chat) => {
                        let chat = chat.clone();
                        pool.run(move || m.encode_chat(&chat)).await
                    }
                    _ => return Err(Miss::Unsupported),
                };
                match job {
                    Ok(Ok((ids, cache))) => {
                        match cache {
                            CacheUse::Hit => self.metrics.prefix_cache.with_label_values(&["hit"]).inc(),
                            CacheUse::Miss => self.metrics.prefix_cache.with_label_values(&["miss"]).inc(),
                            CacheUse::Bypass => {}
                        }
                        Ok(Tokenized { ids, media: None })
                    }
                    Ok(Err(EncodeError::Unsupported(_) | EncodeError::NoTemplate)) => Err(Miss::Unsupported),
                    Ok(Err(e)) => Err(Miss::Failed(e.into())),
                    Err(e) => Err(Miss::Failed(e.into())),
                }
            }
        }
    }
}

/// True when a chat message has a non-text content part (image, audio, video).
fn has_media(prompt: &Prompt) -> bool {
    let Prompt::Chat(chat) = prompt else { return false };
    chat.messages.iter().any(|m| match &m.content {
        MessageContent::Parts(parts) => parts.iter().any(|p| !matches!(p.kind.as_str(), "text" | "input_text")),
        _ => false,
    })
}

#[cfg(test)]
mod tests;
