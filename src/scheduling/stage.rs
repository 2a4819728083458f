//! The asynchronous stage before a decision, called once per request by the ext_proc stream:
//! everything the synchronous scheduler needs awaited first. In order: the tokenize step
//! (token ids and multimodal items), Flow Control admission (gate `flowControl`; layer 0, so
//! predictions made after a queue wait reflect the load at dispatch), the prefix lookups of
//! producers whose index lives outside the process (the Redis-backed precise index), then the encoder-cache
//! sizes and latency predictions of every `predicted-latency-producer`. What it awaits is a
//! [`Stage`] the config loader builds from the plugins' stage capabilities
//! (`PluginInstance::{tokenize_step, latency_step, encoder_cache_sizer}`); its results are
//! phase 1 of the request's `RequestData`, and the data producers fill phase 2 in
//! `Scheduler::schedule_with`. Each step is bounded by its own deadline; a step that misses
//! it leaves its data absent.

use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;

use super::scheduler::Scheduler;
use crate::endpoints::store::EndpointStore;
use crate::flowcontrol::{DEFAULT_FLOW, FlowController, FlowRequest, Outcome, slo_ttft};
use crate::framework::data::{ByProducer, RequestData};
use crate::framework::plugin::{EncoderCacheSizer, PluginName, PrefixPrefetch};
use crate::latency::Predictor;
use crate::request::InferenceRequest;
use crate::request::estimate::estimate_tokens;
use crate::telemetry::otel;
use crate::tokenize::Tokenizer;

/// What the stage before a decision awaits, resolved once when the config loads.
#[derive(Clone, Debug, Default)]
pub struct Stage {
    /// The tokenize step (the first producer's, in producer order, that has one).
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Latency predictions, in producer order.
    pub predictors: Vec<StagePredictor>,
    /// Prefix lookups in indexes outside the process, in producer order.
    pub prefetches: Vec<Arc<dyn PrefixPrefetch>>,
}

/// One latency prediction the stage awaits.
#[derive(Clone, Debug)]
pub struct StagePredictor {
    /// The producer instance whose `RequestData::predicted` entry the answer becomes.
    pub producer: PluginName,
    /// The predictor.
    pub predictor: Arc<Predictor>,
    /// The encoder-cache sizes the features use (`useEncoderCacheFeatures`), when bound.
    pub encoder_cache: Option<Arc<dyn EncoderCacheSizer>>,
}

/// Runs the stage for one parsed request. `tokenize_input` gives the OpenAI-style JSON a
/// rendering tokenizer reads (called only when a tokenizer runs). `Err` is the Flow Control
/// outcome that ended the request.
pub async fn before_decision(
    scheduler: &Scheduler,
    flow_control: Option<&FlowController>,
    store: &EndpointStore,
    request: &InferenceRequest,
    tokenize_input: impl FnOnce() -> Bytes,
) -> Result<RequestData, Outcome> {
    let stage = scheduler.stage();
    let mut data = RequestData::default();
    tokenize(stage, request, &mut data, tokenize_input).instrument(otel::tokenize_span()).await;
    if let Some(controller) = flow_control {
        let flow = flow_request(scheduler, request);
        let wait = otel::flow_control_span(flow.priority);
        match controller.enqueue_and_wait(flow).instrument(wait).await {
            Outcome::Dispatched => {}
            ended => return Err(ended),
        }
    }
    prefetch_prefix(stage, request, &mut data).await;
    data.predicted = predict_latency(stage, store, request, &data).await;
    Ok(data)
}

/// Every prefix prefetch (after Flow Control, so the answer is fresh at dispatch); each bounds
/// its own wait. Keys come from the tokenize step's ids, or, when the config has no tokenize
/// step, from the ids the estimate backend will produce in phase 2 (given ids pass through);
/// a tokenize step that missed leaves nothing to look up.
async fn prefetch_prefix(stage: &Stage, request: &InferenceRequest, data: &mut RequestData) {
    if stage.prefetches.is_empty() {
        return;
    }
    let tokens: Arc<[u32]> = match (&data.tokens, &stage.tokenizer, &request.body) {
        (Some(t), _, _) => t.clone(),
        (None, None, Some(body)) => estimate_tokens(&body.prompt),
        _ => return,
    };
    for step in &stage.prefetches {
        let matches = step.prefetch(request, &tokens).await;
        data.prefetched_prefix.insert(step.producer().clone(), Arc::new(matches));
    }
}

/// The tokenize step, when the config has one.
async fn tokenize(stage: &Stage, request: &InferenceRequest, data: &mut RequestData, input: impl FnOnce() -> Bytes) {
    let Some(tokenizer) = &stage.tokenizer else { return };
    let Some(parsed) = &request.body else { return };
    if let Some(t) = tokenizer.tokenize_full(&request.target_model, parsed, input()).await {
        data.tokens = Some(t.ids);
        data.mm_items = t.media;
    }
}

/// What Flow Control queues for this request.
fn flow_request(scheduler: &Scheduler, request: &InferenceRequest) -> FlowRequest {
    FlowRequest {
        fairness_id: request.headers.fairness_id().unwrap_or(DEFAULT_FLOW).to_string(),
        priority: scheduler.priority(request),
        bytes: request.body_len as u64,
        model: request.incoming_model.clone(),
        target: request.target_model.clone(),
        slo_ttft: slo_ttft(&request.headers),
    }
}

/// Awaits every latency predictor (bounded by its own deadline) for all endpoints.
async fn predict_latency(
    stage: &Stage,
    store: &EndpointStore,
    request: &InferenceRequest,
    data: &RequestData,
) -> ByProducer<Arc<crate::latency::Predicted>> {
    let mut predicted = ByProducer::default();
    if stage.predictors.is_empty() {
        return predicted;
    }
    let candidates = store.candidates();
    // Every size is read before the first await: all predictions see one snapshot.
    let sizes: Vec<_> = stage
        .predictors
        .iter()
        .map(|step| step.encoder_cache.as_ref().map(|sizer| sizer.encoder_cache_sizes(request, data, &candidates)))
        .collect();
    for (step, sizes) in stage.predictors.iter().zip(sizes) {
        let tokens = data.tokens.as_deref();
        if let Some(p) = step.predictor.predict(request, tokens, &candidates, sizes.as_ref()).await {
            predicted.insert(step.producer.clone(), p);
        }
    }
    predicted
}
