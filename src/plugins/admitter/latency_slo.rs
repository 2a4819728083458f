//! `latency-slo-admitter` (GIE/llm-d): denies a sheddable request (priority < 0) that carries
//! a latency SLO when no endpoint can serve it within that SLO, instead of routing it to a
//! guaranteed miss.
//!
//! Admits when any of these holds: the priority is >= 0; the request sets neither
//! `x-slo-ttft-ms` nor `x-slo-tpot-ms` (llm-d spellings `x-llm-d-slo-ttft-ms`,
//! `x-llm-d-slo-tpot-ms`) to a positive number; no candidate has a prediction (fail open);
//! some candidate's prediction meets the SLO; some candidate is idle (no running requests);
//! some candidate is cold (KV-cache usage < 2 %, where predictions are unreliable). Otherwise
//! the request is denied with `no valid endpoint available to serve the request`.
//!
//! A prediction meets the SLO when each SLO the request sets is met (`headroom >= 0`); an SLO
//! the request does not set is not checked (the reference leaves that to the producer; a
//! request with only a TTFT SLO would otherwise never be admitted under load).
//!
//! Parameters: `latencyPredictionInfoProducerName` ("" = the default
//! `predicted-latency-producer`).

use std::sync::Arc;

use serde::Deserialize;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::data::LatencyPrediction;
use crate::framework::plugin::{Admitter, Consumer, PluginInstance, PluginName};
use crate::latency::features::{SLO_TPOT_HEADERS, SLO_TTFT_HEADERS, slo_ms};
use crate::plugins::scorer::producer_name;

/// Type name.
pub const TYPE: &str = "latency-slo-admitter";

/// KV-cache usage below which an endpoint counts as cold.
const COLD_KV_USAGE: f64 = 0.02;

/// The denial reason (llm-d wording).
pub const REASON: &str = "no valid endpoint available to serve the request";

/// Parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Latency producer whose predictions are read.
    pub latency_prediction_info_producer_name: String,
}

/// The admitter.
#[derive(Debug)]
pub struct LatencySloAdmitter {
    producer: Option<PluginName>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    let a = Arc::new(LatencySloAdmitter { producer: producer_name(p.latency_prediction_info_producer_name) });
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_admitter(a.clone()).with_consumer(a))
}

impl Consumer for LatencySloAdmitter {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::LatencyPredictionInfo(self.producer.clone())]
    }
}

/// True when `p` meets every SLO that is set (> 0 ms).
fn meets(p: &LatencyPrediction, ttft_slo_ms: f64, tpot_slo_ms: f64) -> bool {
    (ttft_slo_ms <= 0.0 || p.ttft_headroom_ms >= 0.0) && (tpot_slo_ms <= 0.0 || p.tpot_headroom_ms >= 0.0)
}

impl Admitter for LatencySloAdmitter {
    fn admit(&self, cx: &SchedulingContext<'_>, priority: i32, candidates: &[Candidate]) -> Result<(), String> {
        if priority >= 0 {
            return Ok(());
        }
        let (ttft_slo, tpot_slo) = (slo_ms(cx.request, SLO_TTFT_HEADERS), slo_ms(cx.request, SLO_TPOT_HEADERS));
        if ttft_slo <= 0.0 && tpot_slo <= 0.0 {
            return Ok(());
        }
        let predictions = cx.data.latency.get(self.producer.as_deref());
        let mut has_prediction = false;
        for c in candidates {
            let m = &c.metrics.metrics;
            // Cold or idle endpoints can likely serve it whatever the prediction says.
            if c.metrics_known && (m.kv_cache_usage < COLD_KV_USAGE || m.running_requests == 0) {
                return Ok(());
            }
            if let Some(p) = predictions.and_then(|p| p.per_endpoint.get(c.id())) {
                has_prediction = true;
                if meets(p, ttft_slo, tpot_slo) {
                    return Ok(());
                }
            }
        }
        // No prediction at all: nothing to judge by, fail open.
        if !has_prediction {
            return Ok(());
        }
        Err(REASON.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{LatencyPredictions, RequestData};
    use crate::request::InferenceRequest;
    use crate::request::headers::RequestHeaders;
    use crate::test_util::endpoint;

    fn admitter(params: serde_json::Value) -> Arc<dyn Admitter> {
        let spec =
            PluginSpec { name: TYPE.into(), type_name: TYPE.into(), parameters: params, path: "plugins[0]".into() };
        build(&spec, &BuildContext::default()).expect("builds").admitter.expect("admitter role")
    }

    fn request(headers: &[(&str, &str)]) -> InferenceRequest {
        let all = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        InferenceRequest { headers: RequestHeaders { all }, ..Default::default() }
    }

    /// Predictions from the default producer `lp`: (endpoint, ttft headroom, tpot headroom).
    fn data(rows: &[(&str, f64, f64)]) -> RequestData {
        let per_endpoint: HashMap<_, _> = rows
            .iter()
            .map(|(id, t, p)| {
                let pred = LatencyPrediction { ttft_headroom_ms: *t, tpot_headroom_ms: *p, ..Default::default() };
                (Arc::<str>::from(*id), pred)
            })
            .collect();
        RequestData {
            latency: ByProducer::only("lp", Arc::new(LatencyPredictions { per_endpoint })),
            ..Default::default()
        }
    }

    fn busy(name: &str) -> Candidate {
        endpoint(name).running(3).kv_usage(0.5).build()
    }

    fn verdict(a: &dyn Admitter, r: &InferenceRequest, d: &RequestData, prio: i32, c: &[Candidate]) -> bool {
        let cx = SchedulingContext { request: r, data: d, now: tokio::time::Instant::now() };
        a.admit(&cx, prio, c).is_ok()
    }

    #[test]
    fn denies_sheddable_requests_only_when_no_endpoint_can_meet_the_slo() {
        let a = admitter(serde_json::Value::Null);
        let slo = request(&[("x-slo-ttft-ms", "200")]);
        let missing = data(&[("a", -10.0, 5.0), ("b", -1.0, -1.0)]);
        let pool = [busy("a"), busy("b")];
        assert!(!verdict(&*a, &slo, &missing, -1, &pool), "all predictions miss the TTFT SLO");
        let cx = SchedulingContext { request: &slo, data: &missing, now: tokio::time::Instant::now() };
        assert_eq!(a.admit(&cx, -1, &pool), Err(REASON.to_string()));
        assert!(verdict(&*a, &slo, &missing, 0, &pool), "priority >= 0 is never denied");
        assert!(verdict(&*a, &request(&[]), &missing, -1, &pool), "no SLO header");
        assert!(verdict(&*a, &request(&[("x-slo-ttft-ms", "abc")]), &missing, -1, &pool), "unparsable SLO");
        // Only the TTFT SLO is set: TPOT headroom is not checked.
        assert!(verdict(&*a, &slo, &data(&[("a", 1.0, -50.0)]), -1, &pool));
        // Both set: both must hold.
        let both = request(&[("x-llm-d-slo-ttft-ms", "200"), ("x-llm-d-slo-tpot-ms", "20")]);
        assert!(!verdict(&*a, &both, &data(&[("a", 1.0, -50.0)]), -1, &pool));
        assert!(verdict(&*a, &both, &data(&[("a", -1.0, 0.0), ("b", 0.0, 3.0)]), -1, &pool));
    }

    #[test]
    fn idle_cold_or_unpredicted_pools_fail_open() {
        let a = admitter(serde_json::Value::Null);
        let slo = request(&[("x-slo-ttft-ms", "200")]);
        let missing = data(&[("a", -10.0, 0.0), ("b", -10.0, 0.0)]);
        let idle = endpoint("b").running(0).kv_usage(0.5).build();
        assert!(verdict(&*a, &slo, &missing, -1, &[busy("a"), idle]));
        let cold = endpoint("b").running(4).kv_usage(0.01).build();
        assert!(verdict(&*a, &slo, &missing, -1, &[busy("a"), cold]));
        assert!(verdict(&*a, &slo, &RequestData::default(), -1, &[busy("a"), busy("b")]), "no predictions");
        assert!(verdict(&*a, &slo, &data(&[("z", -10.0, 0.0)]), -1, &[busy("a")]), "none for these candidates");
    }

    #[test]
    fn parameters_are_strict_and_name_the_producer() {
        let named = admitter(serde_json::json!({"latencyPredictionInfoProducerName": "other"}));
        let slo = request(&[("x-slo-ttft-ms", "200")]);
        // The default producer's predictions are not the named producer's: fail open.
        assert!(verdict(&*named, &slo, &data(&[("a", -10.0, 0.0)]), -1, &[busy("a")]));
        let spec = PluginSpec {
            name: TYPE.into(),
            type_name: TYPE.into(),
            parameters: serde_json::json!({"bogus": 1}),
            path: "plugins[2]".into(),
        };
        assert_eq!(build(&spec, &BuildContext::default()).unwrap_err().path, "plugins[2].parameters");
    }
}
