//! What the predictor is asked and how its answer becomes `LatencyPredictionInfo`: the
//! features of each candidate (metrics snapshot and prompt length) and the request's SLOs
//! (`x-slo-ttft-ms`, `x-slo-tpot-ms`, llm-d spellings `x-llm-d-slo-ttft-ms`,
//! `x-llm-d-slo-tpot-ms`; absent, unparsable, negative or non-finite = 0 ms).

use super::wire::{Features, Prediction};
use crate::endpoints::model::Candidate;
use crate::request::InferenceRequest;

/// `LatencyPredictionInfo` of one endpoint: predicted latencies and headroom against the
/// request's SLOs (`headroom = SLO - predicted`; an absent SLO counts as 0 ms).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencyPrediction {
    /// Predicted time to first token, ms.
    pub ttft_ms: f64,
    /// Predicted time per output token, ms.
    pub tpot_ms: f64,
    /// TTFT SLO minus predicted TTFT, ms.
    pub ttft_headroom_ms: f64,
    /// TPOT SLO (times the buffer factor) minus predicted TPOT, ms.
    pub tpot_headroom_ms: f64,
}

impl LatencyPrediction {
    /// True when both headrooms are >= 0 (the positive tier).
    pub fn meets_slo(&self) -> bool {
        self.ttft_headroom_ms >= 0.0 && self.tpot_headroom_ms >= 0.0
    }
}

/// TTFT SLO headers, in order of preference.
pub const SLO_TTFT_HEADERS: &[&str] = &["x-slo-ttft-ms", "x-llm-d-slo-ttft-ms"];
/// TPOT SLO headers, in order of preference.
pub const SLO_TPOT_HEADERS: &[&str] = &["x-slo-tpot-ms", "x-llm-d-slo-tpot-ms"];

/// Prompt length in tokens: the tokenize step's count, else GIE's estimate (body bytes / 4,
/// at least 1).
pub fn input_tokens(request: &InferenceRequest, tokens: Option<&[u32]>) -> u64 {
    match tokens {
        Some(t) => t.len() as u64,
        None => (request.body_len as u64 / 4).max(1),
    }
}

/// Multimodal encoder-cache sizes of one candidate (`encoder_input_size`,
/// `encoder_matched_size`), from the `mm-embeddings-cache-producer` a latency producer binds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncoderSizes {
    /// Total weight of the request's items.
    pub input: u64,
    /// Weight of the items the candidate likely holds.
    pub matched: u64,
}

/// Features of `candidate` for `request` before dispatch. The prefix-cache score is 0: the
/// prediction call runs before the prefix producers (see the module docs of `latency`). The
/// encoder sizes are set only when `encoder` is given (`useEncoderCacheFeatures`).
pub fn features(input_tokens: u64, candidate: &Candidate, encoder: Option<EncoderSizes>) -> Features {
    let m = &candidate.metrics.metrics;
    let kv = if m.kv_cache_usage.is_finite() { m.kv_cache_usage.clamp(0.0, 1.0) } else { 0.0 };
    Features {
        kv_cache_percentage: kv,
        input_token_length: input_tokens,
        num_request_waiting: m.waiting_queue_size,
        num_request_running: m.running_requests,
        num_tokens_generated: 0,
        prefix_cache_score: 0.0,
        encoder_input_size: encoder.map(|e| e.input),
        encoder_matched_size: encoder.map(|e| e.matched.min(e.input)),
    }
}

/// A millisecond SLO from the first present header of `names` (0 when none is usable).
pub fn slo_ms(request: &InferenceRequest, names: &[&str]) -> f64 {
    request
        .headers
        .get_any(names)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .unwrap_or(0.0)
}

/// Headroom of one prediction against the request's SLOs; the TPOT SLO is multiplied by
/// `tpot_buffer_factor` (GIE `SLO_BUFFER_FACTOR`).
pub fn with_headroom(p: Prediction, ttft_slo_ms: f64, tpot_slo_ms: f64, tpot_buffer_factor: f64) -> LatencyPrediction {
    LatencyPrediction {
        ttft_ms: p.ttft_ms,
        tpot_ms: p.tpot_ms,
        ttft_headroom_ms: ttft_slo_ms - p.ttft_ms,
        tpot_headroom_ms: tpot_slo_ms * tpot_buffer_factor - p.tpot_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chat_request, endpoint};

    fn hdr(k: &str, v: &str) -> crate::request::headers::RequestHeaders {
        crate::request::headers::RequestHeaders { all: vec![(k.into(), v.into())] }
    }

    #[test]
    fn slo_headers_and_features() {
        let mut r = chat_request("m", &["hi"]);
        assert_eq!(slo_ms(&r, SLO_TTFT_HEADERS), 0.0);
        r.headers = hdr("x-llm-d-slo-ttft-ms", "250");
        assert_eq!(slo_ms(&r, SLO_TTFT_HEADERS), 250.0);
        r.headers = hdr("x-slo-ttft-ms", "-3");
        assert_eq!(slo_ms(&r, SLO_TTFT_HEADERS), 0.0, "negative SLO ignored");
        r.headers = hdr("x-slo-ttft-ms", "NaN");
        assert_eq!(slo_ms(&r, SLO_TTFT_HEADERS), 0.0, "NaN ignored");
        let c = endpoint("a").waiting(3).running(2).kv_usage(1.7).build();
        let f = features(100, &c, None);
        assert_eq!((f.num_request_waiting, f.num_request_running, f.kv_cache_percentage), (3, 2, 1.0));
        assert_eq!((f.encoder_input_size, f.encoder_matched_size), (None, None));
        let json = serde_json::to_value(f).unwrap();
        assert!(json.get("encoder_input_size").is_none(), "absent unless enabled: {json}");
        let f = features(100, &c, Some(EncoderSizes { input: 256, matched: 300 }));
        assert_eq!((f.encoder_input_size, f.encoder_matched_size), (Some(256), Some(256)), "matched clamped");
        let json = serde_json::to_value(f).unwrap();
        assert_eq!(
            (json["encoder_input_size"].as_u64(), json["encoder_matched_size"].as_u64()),
            (Some(256), Some(256))
        );
        let h = with_headroom(Prediction { ttft_ms: 80.0, tpot_ms: 10.0 }, 200.0, 20.0, 0.5);
        assert_eq!((h.ttft_headroom_ms, h.tpot_headroom_ms), (120.0, 0.0));
        assert!(h.meets_slo());
    }
}
