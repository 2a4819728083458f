//! `predicted-latency-producer`: produces `LatencyPredictionInfo` (predicted TTFT/TPOT per
//! candidate and their headroom against the request's SLOs) from the latency-predictor
//! sidecars, and feeds the training sidecar with observed latencies.
//!
//! Before the decision `scheduling::stage` awaits one bulk prediction for all endpoints
//! (`crate::latency::Predictor`, registered as the instance's `latency_step`); `produce` copies the answers of the current candidates with
//! `ttftHeadroom = SLO_ttft - ttft`, `tpotHeadroom = SLO_tpot x sloBufferFactor - tpot` (SLO
//! headers `x-slo-ttft-ms` / `x-slo-tpot-ms`, llm-d `x-llm-d-slo-*`; absent = 0). No answer =
//! no `LatencyPredictionInfo` for that request; consumers fall back as documented. Pre-request:
//! records the chosen endpoint's predictions (`…_predicted_ttft_seconds`,
//! `…_predicted_tpot_seconds`) and starts a training sample; response hooks finish it.
//!
//! Parameters: `predictionServerUrls` (list; default env `PREDICTION_SERVER_URL`, else
//! `PREDICTION_SERVERS` (comma-separated), else `http://localhost:8001`),
//! `trainingServerUrl` (env `TRAINING_SERVER_URL`, else `http://localhost:8000`),
//! `training` (true), `timeout` (`200ms`, per prediction call and per upload),
//! `maxBulkSize` (env `LATENCY_MAX_BULK_SIZE`, else 100; 1 to 100), `sloBufferFactor` (1.0;
//! positive), `predictInProduce` / `predictInPrepareData` (true; false = training only).
//! `useEncoderCacheFeatures` (false) with `encoderCacheMatchInfoProducerName` ("" = the
//! default `mm-embeddings-cache-producer`, created when absent): the producer then consumes
//! `EncoderCacheMatchInfo` (a misnamed producer is a config error), and each prediction (and
//! so each training sample) carries `encoder_input_size` / `encoder_matched_size` computed
//! by that producer just before the prediction call.
//! Accepted and ignored (GIE/llm-d knobs of features epp does not have): `samplingMean`,
//! `maxDecodeTokenSamplesForPrediction`, `contextTTL`, `streamingMode`, `endpointRoleLabel`,
//! `latencyWindowPluginRef`, `prefixMatchInfoProducerName`.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, de_duration, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::{LatencyPredictions, RequestData};
use crate::framework::plugin::{DataProducer, LatencyStep, PluginInstance, PluginName, PreRequest, ResponseHook};
use crate::framework::result::{HeaderEdits, SchedulingResult};
use crate::latency::features::{SLO_TPOT_HEADERS, SLO_TTFT_HEADERS, slo_ms, with_headroom};
use crate::latency::trainer::Trainer;
use crate::latency::{Predicted, Predictor};
use crate::request::InferenceRequest;
use crate::request::usage::Usage;

/// Type name.
pub const TYPE: &str = "predicted-latency-producer";

/// Largest bulk the sidecar accepts.
const MAX_BULK: usize = 100;

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // the accepted-and-ignored knobs are never read
pub struct Params {
    /// Prediction server base URLs.
    pub prediction_server_urls: Vec<String>,
    /// Training server base URL.
    pub training_server_url: String,
    /// Post training samples.
    pub training: bool,
    /// Deadline of one prediction call (and of one upload).
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Entries per bulk call.
    pub max_bulk_size: usize,
    /// Multiplier of the TPOT SLO.
    pub slo_buffer_factor: f64,
    /// Ask for predictions (llm-d spelling).
    pub predict_in_produce: Option<bool>,
    /// Ask for predictions (GIE spelling).
    pub predict_in_prepare_data: Option<bool>,
    sampling_mean: Option<Value>,
    max_decode_token_samples_for_prediction: Option<Value>,
    #[serde(rename = "contextTTL")]
    context_ttl: Option<Value>,
    streaming_mode: Option<Value>,
    endpoint_role_label: Option<Value>,
    latency_window_plugin_ref: Option<Value>,
    /// Read `EncoderCacheMatchInfo` (multimodal encoder-cache sizes).
    pub use_encoder_cache_features: bool,
    /// The encoder-cache producer to read (empty = the default one).
    pub encoder_cache_match_info_producer_name: String,
    prefix_match_info_producer_name: Option<Value>,
}

fn env_list(name: &str) -> Option<Vec<String>> {
    let v = std::env::var(name).ok()?;
    let list: Vec<String> = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    (!list.is_empty()).then_some(list)
}

impl Default for Params {
    fn default() -> Self {
        Self {
            prediction_server_urls: env_list("PREDICTION_SERVER_URL")
                .or_else(|| env_list("PREDICTION_SERVERS"))
                .unwrap_or_else(|| vec!["http://localhost:8001".into()]),
            training_server_url: std::env::var("TRAINING_SERVER_URL")
                .ok()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "http://localhost:8000".into()),
            training: true,
            timeout: Duration::from_millis(200),
            max_bulk_size: std::env::var("LATENCY_MAX_BULK_SIZE")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .filter(|n| (1..=MAX_BULK).contains(n))
                .unwrap_or(MAX_BULK),
            slo_buffer_factor: 1.0,
            predict_in_produce: None,
            predict_in_prepare_data: None,
            sampling_mean: None,
            max_decode_token_samples_for_prediction: None,
            context_ttl: None,
            streaming_mode: None,
            endpoint_role_label: None,
            latency_window_plugin_ref: None,
            use_encoder_cache_features: false,
            encoder_cache_match_info_producer_name: String::new(),
            prefix_match_info_producer_name: None,
        }
    }
}

/// The producer.
#[derive(Debug)]
pub struct PredictedLatencyProducer {
    name: PluginName,
    predictor: Option<Arc<Predictor>>,
    trainer: Option<Trainer>,
    buffer_factor: f64,
    /// `Some(producer)` with `useEncoderCacheFeatures` (inner `None` = the default producer).
    encoder_cache: Option<Option<PluginName>>,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let at = |k: &str| format!("{}.parameters.{k}", spec.path);
    if p.prediction_server_urls.is_empty() || p.prediction_server_urls.iter().any(|u| !u.starts_with("http://")) {
        return Err(BuildError::new(at("predictionServerUrls"), "must list at least one http:// URL"));
    }
    if p.training && !p.training_server_url.starts_with("http://") {
        return Err(BuildError::new(at("trainingServerUrl"), "must be an http:// URL"));
    }
    if p.timeout.is_zero() {
        return Err(BuildError::new(at("timeout"), "must be > 0"));
    }
    if !(1..=MAX_BULK).contains(&p.max_bulk_size) {
        return Err(BuildError::new(at("maxBulkSize"), format!("must be within [1, {MAX_BULK}]")));
    }
    if !(p.slo_buffer_factor > 0.0 && p.slo_buffer_factor.is_finite()) {
        return Err(BuildError::new(at("sloBufferFactor"), "must be > 0"));
    }
    let predict = p.predict_in_produce.or(p.predict_in_prepare_data).unwrap_or(true);
    let metrics = cx.metrics.latency.clone();
    let predictor = predict
        .then(|| Arc::new(Predictor::new(p.prediction_server_urls, p.timeout, p.max_bulk_size, metrics.clone())));
    let trainer = p.training.then(|| Trainer::new(p.training_server_url, p.timeout, metrics));
    let encoder_cache = p
        .use_encoder_cache_features
        .then(|| crate::plugins::scorer::producer_name(p.encoder_cache_match_info_producer_name));
    let step = predictor.clone().map(|predictor| LatencyStep { predictor, encoder_cache: encoder_cache.clone() });
    let plugin = Arc::new(PredictedLatencyProducer {
        name: spec.name.clone(),
        predictor,
        trainer,
        buffer_factor: p.slo_buffer_factor,
        encoder_cache,
    });
    let instance = PluginInstance::new(spec.name.clone(), TYPE)
        .with_producer(plugin.clone())
        .with_pre_request(plugin.clone())
        .with_response(plugin);
    Ok(match step {
        Some(step) => instance.with_latency_step(step),
        None => instance,
    })
}

impl PredictedLatencyProducer {
    fn raw<'a>(&self, data: &'a RequestData) -> Option<&'a Arc<Predicted>> {
        data.predicted.get(Some(&self.name))
    }
}

impl DataProducer for PredictedLatencyProducer {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::LatencyPredictionInfo(Some(self.name.clone()))]
    }

    fn consumes(&self) -> Vec<DataKey> {
        self.encoder_cache.iter().map(|name| DataKey::EncoderCacheMatchInfo(name.clone())).collect()
    }

    fn produce(&self, request: &InferenceRequest, candidates: &[Candidate], data: &mut RequestData) {
        let Some(raw) = self.raw(data).cloned() else { return };
        let (ttft_slo, tpot_slo) = (slo_ms(request, SLO_TTFT_HEADERS), slo_ms(request, SLO_TPOT_HEADERS));
        let per_endpoint = candidates
            .iter()
            .filter_map(|c| raw.per_endpoint.get(c.id()).map(|(p, _)| (c.id().clone(), *p)))
            .map(|(id, p)| (id, with_headroom(p, ttft_slo, tpot_slo, self.buffer_factor)))
            .collect();
        data.latency.insert(self.name.clone(), Arc::new(LatencyPredictions { per_endpoint }));
    }
}

impl PreRequest for PredictedLatencyProducer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        let Some(target) = result.primary().and_then(|r| r.targets.first()) else { return };
        let Some((prediction, features)) = self.raw(cx.data).and_then(|r| r.per_endpoint.get(target.id())) else {
            return;
        };
        if let Some(predictor) = &self.predictor {
            let m = predictor.metrics();
            let labels = [cx.request.incoming_model.as_str(), cx.request.target_model.as_str()];
            m.predicted_ttft.with(&labels).observe(prediction.ttft_ms / 1000.0);
            m.predicted_tpot.with(&labels).observe(prediction.tpot_ms / 1000.0);
        }
        if let Some(trainer) = &self.trainer {
            trainer.scheduled(&cx.request.request_id, *features);
        }
    }
}

impl ResponseHook for PredictedLatencyProducer {
    fn on_first_response_chunk(&self, request: &InferenceRequest, _: &SchedulingResult) {
        if let Some(t) = &self.trainer {
            t.first_chunk(&request.request_id);
        }
    }

    fn on_response_complete(&self, request: &InferenceRequest, _: &SchedulingResult, usage: Option<&Usage>) {
        if let Some(t) = &self.trainer {
            t.complete(&request.request_id, usage.map(|u| u.completion_tokens));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::latency::wire::{Features, Prediction};
    use crate::request::headers::RequestHeaders;
    use crate::test_util::endpoint;

    fn producer(params: serde_json::Value) -> PluginInstance {
        let spec =
            PluginSpec { name: "lp".into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() };
        build(&spec, &BuildContext::default()).expect("builds")
    }

    #[test]
    fn produce_copies_predictions_with_headroom() {
        let inst = producer(serde_json::json!({"predictionServerUrls": ["http://127.0.0.1:1"], "sloBufferFactor": 2}));
        assert!(inst.latency_step.is_some(), "predicts before the decision");
        let p = inst.producer.expect("producer role");
        let mut raw = Predicted::default();
        let f = Features::default();
        raw.per_endpoint.insert("a".into(), (Prediction { ttft_ms: 80.0, tpot_ms: 30.0 }, f));
        raw.per_endpoint.insert("gone".into(), (Prediction { ttft_ms: 1.0, tpot_ms: 1.0 }, f));
        let request = InferenceRequest {
            headers: RequestHeaders {
                all: vec![("x-slo-ttft-ms".into(), "100".into()), ("x-slo-tpot-ms".into(), "20".into())],
            },
            ..Default::default()
        };
        let mut data = RequestData {
            predicted: ByProducer::only("lp", Arc::new(raw)),
            latency: ByProducer::with_default(Some("lp".into())),
            ..Default::default()
        };
        p.produce(&request, &[endpoint("a").build(), endpoint("b").build()], &mut data);
        let l = data.latency.get(None).expect("LatencyPredictionInfo");
        assert_eq!(l.per_endpoint.len(), 1, "only current candidates with a prediction");
        let a = l.per_endpoint["a"];
        assert_eq!((a.ttft_headroom_ms, a.tpot_headroom_ms), (20.0, 10.0));
        // No predictions awaited -> nothing produced.
        let mut empty = RequestData::default();
        p.produce(&InferenceRequest::default(), &[endpoint("a").build()], &mut empty);
        assert!(empty.latency.is_empty());
    }

    #[test]
    fn parameters() {
        let err = |v| {
            let spec =
                PluginSpec { name: "lp".into(), type_name: TYPE.into(), parameters: v, path: "plugins[0]".into() };
            build(&spec, &BuildContext::default()).unwrap_err().path
        };
        assert_eq!(err(serde_json::json!({"predictionServerUrls": []})), "plugins[0].parameters.predictionServerUrls");
        assert_eq!(err(serde_json::json!({"maxBulkSize": 500})), "plugins[0].parameters.maxBulkSize");
        assert_eq!(err(serde_json::json!({"sloBufferFactor": 0})), "plugins[0].parameters.sloBufferFactor");
        assert_eq!(err(serde_json::json!({"timeout": "0s"})), "plugins[0].parameters.timeout");
        assert_eq!(err(serde_json::json!({"bogus": 1})), "plugins[0].parameters");
        let training_only = producer(serde_json::json!({"predictInPrepareData": false, "samplingMean": 1000}));
        assert!(training_only.latency_step.is_none() && training_only.producer.is_some());
        assert_eq!(err(serde_json::json!({"useEncoderCacheFeatures": "yes"})), "plugins[0].parameters");
    }

    #[test]
    fn encoder_cache_features_bind_a_producer() {
        let consumes = |v| producer(v).producer.expect("producer").consumes();
        assert!(consumes(serde_json::json!({"encoderCacheMatchInfoProducerName": "mm"})).is_empty(), "off by default");
        assert_eq!(
            consumes(serde_json::json!({"useEncoderCacheFeatures": true})),
            vec![DataKey::EncoderCacheMatchInfo(None)]
        );
        assert_eq!(
            consumes(serde_json::json!({"useEncoderCacheFeatures": true, "encoderCacheMatchInfoProducerName": "mm"})),
            vec![DataKey::EncoderCacheMatchInfo(Some("mm".into()))]
        );
    }
}
