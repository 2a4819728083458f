//! `SchedulingContext`: what every plugin call sees (the request, the per-request data the
//! producers computed, the time of the decision), and `DataKey`, the typed names of that data.

use tokio::time::Instant;

use super::data::RequestData;
use super::plugin::PluginName;
use crate::request::InferenceRequest;

/// A kind of per-request data, with the producer instance it comes from where several
/// producers of the same kind may coexist (`None` = the default producer of that kind).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DataKey {
    /// `TokenizedPrompt`: the prompt's token ids.
    TokenizedPrompt,
    /// `PrefixCacheMatchInfo` from a named producer (None = the default approximate one).
    PrefixCacheMatchInfo(Option<PluginName>),
    /// `InFlightLoad` (+ `UncachedRequestTokens`) from a named producer.
    InFlightLoad(Option<PluginName>),
    /// `LatencyPredictionInfo` from a named `predicted-latency-producer`.
    LatencyPredictionInfo(Option<PluginName>),
    /// `SessionID`: the request's session id (one per request; default `session-id-producer`).
    SessionId,
    /// `EncoderCacheMatchInfo` from a named `mm-embeddings-cache-producer` (None = default).
    EncoderCacheMatchInfo(Option<PluginName>),
}

/// Read-only view handed to every plugin call.
#[derive(Clone, Copy, Debug)]
pub struct SchedulingContext<'a> {
    /// The request.
    pub request: &'a InferenceRequest,
    /// Data computed by producers before scheduling.
    pub data: &'a RequestData,
    /// When the decision started.
    pub now: Instant,
}
