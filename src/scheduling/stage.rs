//! The asynchronous stage before a decision, called once per request by the ext_proc stream:
//! everything the synchronous scheduler needs awaited first. In order: the tokenize step
//! (token ids and multimodal items into the request), Flow Control admission (gate
//! `flowControl`; layer 0, so predictions made after a queue wait reflect the load at
//! dispatch), then the encoder-cache sizes and latency predictions of every
//! `predicted-latency-producer`. The predictions are phase 1 of the request's `RequestData`;
//! the data producers fill phase 2 in `Scheduler::schedule_with`. Each step is bounded by its
//! own deadline; a step that misses it leaves its data absent.

use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;

use super::scheduler::Scheduler;
use crate::endpoints::store::EndpointStore;
use crate::flowcontrol::{DEFAULT_FLOW, FlowController, FlowRequest, Outcome, slo_ttft};
use crate::framework::data::RequestData;
use crate::framework::plugin::PluginName;
use crate::latency::Predicted;
use crate::request::InferenceRequest;
use crate::telemetry::otel;

/// Runs the stage for one parsed request. `tokenize_input` gives the OpenAI-style JSON a
/// rendering tokenizer reads (called only when a tokenizer runs). `Err` is the Flow Control
/// outcome that ended the request.
pub async fn before_decision(
    scheduler: &Scheduler,
    flow_control: Option<&FlowController>,
    store: &EndpointStore,
    request: &mut InferenceRequest,
    tokenize_input: impl FnOnce() -> Bytes,
) -> Result<RequestData, Outcome> {
    tokenize(scheduler, request, tokenize_input).instrument(otel::tokenize_span()).await;
    if let Some(controller) = flow_control {
        let flow = flow_request(scheduler, request);
        let wait = otel::flow_control_span(flow.priority);
        match controller.enqueue_and_wait(flow).instrument(wait).await {
            Outcome::Dispatched => {}
            ended => return Err(ended),
        }
    }
    Ok(RequestData { predicted: predict_latency(scheduler, store, request).await, ..RequestData::default() })
}

/// The tokenize step of the first producer that has one.
async fn tokenize(scheduler: &Scheduler, request: &mut InferenceRequest, input: impl FnOnce() -> Bytes) {
    let Some(tokenizer) = scheduler.producers.iter().find_map(|s| s.plugin.tokenizer().cloned()) else {
        return;
    };
    let Some(parsed) = &request.body else { return };
    if let Some(t) = tokenizer.tokenize_full(&request.target_model, parsed, input()).await {
        request.tokens = Some(t.ids);
        request.mm_items = t.media;
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
    scheduler: &Scheduler,
    store: &EndpointStore,
    request: &InferenceRequest,
) -> Vec<(PluginName, Arc<Predicted>)> {
    if !scheduler.producers.iter().any(|s| s.plugin.predictor().is_some()) {
        return Vec::new();
    }
    let candidates = store.candidates();
    let encoder_sizes = |binding: Option<PluginName>| {
        let name = binding.or_else(|| scheduler.default_encoder_cache_producer.clone())?;
        let source = scheduler.producers.iter().find(|s| s.name == name)?;
        source.plugin.encoder_cache_sizes(request, &candidates)
    };
    let predictors: Vec<_> = scheduler
        .producers
        .iter()
        .filter_map(|s| {
            let predictor = s.plugin.predictor()?.clone();
            let sizes = s.plugin.encoder_cache_binding().and_then(encoder_sizes);
            Some((s.name.clone(), predictor, sizes))
        })
        .collect();
    let mut predicted = Vec::new();
    for (name, predictor, sizes) in predictors {
        if let Some(p) = predictor.predict(request, &candidates, sizes.as_ref()).await {
            predicted.push((name, p));
        }
    }
    predicted
}
