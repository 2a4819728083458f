//! Plugin contracts: one trait per scheduling extension point (profile handler, filter,
//! scorer, picker, data producer, admitter, pre-request hook, response hook, decider,
//! background service, notification source) and the `PluginInstance` that records which roles
//! one configured plugin fills, including the capabilities the asynchronous stage before a
//! decision awaits (tokenize step, latency step, encoder-cache sizer). Flow Control's own extension points (fairness policy,
//! saturation detector) live in `flowcontrol::policy` and are re-exported here. Every
//! scheduling method is synchronous, takes `&self` and does no I/O: plugins read the request,
//! the per-request data produced before scheduling, and the candidates' metric snapshots.

use std::fmt;
use std::sync::Arc;

use super::ScheduleError;
use super::context::{DataKey, SchedulingContext};
use super::data::RequestData;
use super::result::{HeaderEdits, MetadataEdits, ProfileResults, SchedulingResult};
use crate::endpoints::model::Candidate;
pub use crate::flowcontrol::policy::{FairnessPolicy, FlowView, SaturationDetector};
use crate::request::InferenceRequest;
use crate::request::usage::Usage;

/// Name of a configured plugin instance (`plugins[].name`, defaulting to its type).
pub type PluginName = Arc<str>;

/// Chooses which profiles run and combines their results.
pub trait ProfileHandler: Send + Sync + fmt::Debug {
    /// Names of the profiles to run next, given the results so far; empty stops the loop.
    fn pick(&self, cx: &SchedulingContext<'_>, profiles: &[Arc<str>], results: &ProfileResults) -> Vec<Arc<str>>;
    /// Turns the profile results into the scheduling result (primary profile and others).
    fn process_results(
        &self,
        cx: &SchedulingContext<'_>,
        results: ProfileResults,
    ) -> Result<SchedulingResult, ScheduleError>;
}

/// Keeps a subset of the candidates. Must return a subset of its input, in any order.
pub trait Filter: Send + Sync + fmt::Debug {
    /// The kept candidates.
    fn filter(&self, cx: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate>;
}

/// Scores candidates in [0.0, 1.0]; 1.0 is most preferred. The engine clamps out-of-range
/// values and treats a missing score as 0.
pub trait Scorer: Send + Sync + fmt::Debug {
    /// One score per candidate, aligned with `candidates`.
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64>;
}

/// A candidate with its weighted total score.
#[derive(Clone, Debug)]
pub struct ScoredCandidate {
    /// The candidate.
    pub candidate: Candidate,
    /// Sum of weight x clamped score over the profile's scorers.
    pub score: f64,
}

/// Chooses the target endpoints (first = primary) from scored candidates.
pub trait Picker: Send + Sync + fmt::Debug {
    /// The chosen endpoints; a subset of the input.
    fn pick(&self, cx: &SchedulingContext<'_>, scored: Vec<ScoredCandidate>) -> Vec<Candidate>;
}

/// Computes per-request facts once, before any profile runs.
pub trait DataProducer: Send + Sync + fmt::Debug {
    /// What this producer writes.
    fn produces(&self) -> Vec<DataKey>;
    /// What it reads (must be produced earlier).
    fn consumes(&self) -> Vec<DataKey> {
        Vec::new()
    }
    /// Writes its data for this request.
    fn produce(&self, request: &InferenceRequest, candidates: &[Candidate], data: &mut RequestData);
}

/// Encoder-cache sizes for the latency predictor: what an encoder-cache tracker
/// (`mm-embeddings-cache-producer`) knows before the decision. Read-only; called by
/// `scheduling::stage` (phase 1), never by the scheduler.
pub trait EncoderCacheSizer: Send + Sync + fmt::Debug {
    /// The sizes of every candidate for this request. `data` holds what the tokenize step
    /// reported (multimodal items).
    fn encoder_cache_sizes(
        &self,
        request: &InferenceRequest,
        data: &RequestData,
        candidates: &[Candidate],
    ) -> crate::latency::EncoderCacheSizes;
}

/// A latency predictor `scheduling::stage` awaits before the decision
/// (`predicted-latency-producer`); its answer lands in `RequestData::predicted` under the
/// plugin's name.
#[derive(Clone, Debug)]
pub struct LatencyStep {
    /// The predictor.
    pub predictor: Arc<crate::latency::Predictor>,
    /// The encoder-cache sizer whose sizes the features use (`useEncoderCacheFeatures`):
    /// `Some(None)` = the default encoder-cache producer, `None` = no encoder features.
    pub encoder_cache: Option<Option<PluginName>>,
}

/// Decides, after the data producers ran and before any profile runs, whether a request may
/// be scheduled at all. Every instantiated admitter is asked, in declaration order; the first
/// denial ends the request (`500 request cannot be admitted: <reason>`, as GIE and llm-d).
pub trait Admitter: Send + Sync + fmt::Debug {
    /// `Ok(())` admits; `Err(reason)` denies with a short human-readable reason.
    /// `priority` is the request's resolved priority (negative = sheddable).
    fn admit(&self, cx: &SchedulingContext<'_>, priority: i32, candidates: &[Candidate]) -> Result<(), String>;
}

/// Sees the decision before the headers reply; may add or remove request headers and update
/// its own state (e.g. record the prefix on the chosen endpoint).
pub trait PreRequest: Send + Sync + fmt::Debug {
    /// Called once per scheduled request.
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, headers: &mut HeaderEdits);
}

/// Sees the response of a scheduled request.
pub trait ResponseHook: Send + Sync + fmt::Debug {
    /// Response headers arrived (status code when known).
    fn on_response_headers(&self, _request: &InferenceRequest, _result: &SchedulingResult, _status: Option<u16>) {}
    /// Response-header changes to send back to Envoy (e.g. a session token). Called once,
    /// right after `on_response_headers`; the default adds nothing.
    fn edit_response_headers(&self, _request: &InferenceRequest, _result: &SchedulingResult, _edits: &mut HeaderEdits) {
    }
    /// The first response body chunk arrived (called at most once per request, before
    /// `on_response_complete`); the default does nothing.
    fn on_first_response_chunk(&self, _request: &InferenceRequest, _result: &SchedulingResult) {}
    /// Dynamic metadata for the final response message (the response body reply carrying end
    /// of stream, or the trailers reply). Called at most once per request, before
    /// `on_response_complete`; `usage` when the body reported it. The default adds nothing.
    fn response_metadata(
        &self,
        _request: &InferenceRequest,
        _result: &SchedulingResult,
        _usage: Option<&Usage>,
        _metadata: &mut MetadataEdits,
    ) {
    }
    /// The response completed, or the stream ended early; `usage` when the body reported it.
    fn on_response_complete(&self, request: &InferenceRequest, result: &SchedulingResult, usage: Option<&Usage>);
}

/// Decides whether an extra stage (prefill, encode) runs for a request, given the endpoint
/// already chosen for decode (`None` when decode has not run yet, as in prefill-first order).
/// Pure: the same request and endpoint always give the same answer, because the disagg
/// handler may ask more than once per request.
pub trait Decider: Send + Sync + fmt::Debug {
    /// True = run the stage (disaggregate).
    fn disaggregate(&self, cx: &SchedulingContext<'_>, decode_endpoint: Option<&Candidate>) -> bool;
}

/// What a background service gets when the app starts it.
#[derive(Clone, Debug)]
pub struct ServiceContext {
    /// The endpoint store (to follow endpoints as they come and go).
    pub endpoints: crate::endpoints::store::EndpointStore,
    /// Stops the service.
    pub cancel: tokio_util::sync::CancellationToken,
    /// Kubernetes access, when the app has it (`--pool-name`, `--kubeconfig`, in-cluster).
    pub kube: Option<crate::k8s::KubeHandle>,
}

/// Boxed future of a background service call.
pub type ServiceFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Why a plugin's background service did not start: the plugin, the step that failed and
/// the underlying error (kept as the source).
#[derive(Debug, thiserror::Error)]
#[error("{plugin}: {step}{source}")]
pub struct ServiceStartError {
    /// Instance name of the plugin.
    pub plugin: PluginName,
    /// The step that failed, as a message prefix (`""` or e.g. `"drift detection: "`).
    pub step: &'static str,
    /// The underlying error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl ServiceStartError {
    /// `source` stopped `plugin` at `step` (a prefix such as `"drift detection: "`, or `""`).
    pub fn new(
        plugin: &PluginName,
        step: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self { plugin: plugin.clone(), step, source: source.into() }
    }
}

/// A prefix lookup `scheduling::stage` awaits before the decision, for a producer whose index
/// is not in this process (the Redis-backed precise index). The answer is stored as phase-1
/// data (`RequestData::prefetched_prefix`) under [`PrefixPrefetch::producer`] and holds every
/// endpoint found; the producer narrows it to the candidates in phase 2. The implementation
/// bounds its own wait and answers with no matches when the index is unreachable.
pub trait PrefixPrefetch: Send + Sync + fmt::Debug {
    /// The producer instance the answer belongs to.
    fn producer(&self) -> &PluginName;
    /// Looks up the prompt's keys (`tokens`: the tokenize step's ids).
    fn prefetch<'a>(
        &'a self,
        request: &'a InferenceRequest,
        tokens: &'a [u32],
    ) -> ServiceFuture<'a, super::data::PrefixMatches>;
}

/// A plugin's long-running work (sockets, tasks), started once by the app after the config
/// loaded. Scheduling calls never wait for it.
pub trait BackgroundService: Send + Sync + fmt::Debug {
    /// Starts the service; an error aborts startup with a clear message.
    fn start(&self, cx: ServiceContext) -> ServiceFuture<'_, Result<(), ServiceStartError>>;
    /// Barrier: resolves once everything received so far has been applied (tests, benches).
    fn flush(&self) -> ServiceFuture<'_, ()>;
}

/// Declares data a plugin consumes (scorers, filters, handlers), so the loader can create
/// default producers and reject references to producers that do not exist.
pub trait Consumer: Send + Sync + fmt::Debug {
    /// The keys read.
    fn consumes(&self) -> Vec<DataKey>;
}

/// A source of Kubernetes object notifications other plugins subscribe to
/// (`k8s-notification-source`).
pub trait NotificationSource: Send + Sync + fmt::Debug {
    /// The watched kind.
    fn gvk(&self) -> &crate::k8s::notify::Gvk;
    /// A stream of every notification from now on, in watch order; a subscriber too far
    /// behind receives `RecvError::Lagged` and should resync.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::k8s::notify::Notification>;
}

/// One configured plugin and every role it fills.
#[derive(Clone, Debug)]
pub struct PluginInstance {
    /// Instance name.
    pub name: PluginName,
    /// Registered type name.
    pub type_name: &'static str,
    /// Profile-handler role.
    pub profile_handler: Option<Arc<dyn ProfileHandler>>,
    /// Filter role.
    pub filter: Option<Arc<dyn Filter>>,
    /// Scorer role.
    pub scorer: Option<Arc<dyn Scorer>>,
    /// Picker role.
    pub picker: Option<Arc<dyn Picker>>,
    /// Data-producer role.
    pub producer: Option<Arc<dyn DataProducer>>,
    /// Pre-request role.
    pub pre_request: Option<Arc<dyn PreRequest>>,
    /// Response role.
    pub response: Option<Arc<dyn ResponseHook>>,
    /// Data this plugin reads outside the producer role.
    pub consumer: Option<Arc<dyn Consumer>>,
    /// Saturation-detector role.
    pub saturation: Option<Arc<dyn SaturationDetector>>,
    /// Decider role (referred to by name from a profile handler's parameters).
    pub decider: Option<Arc<dyn Decider>>,
    /// Admitter role (every instance with it is asked before scheduling).
    pub admitter: Option<Arc<dyn Admitter>>,
    /// Flow Control fairness-policy role (referred to by `fairnessPolicyRef`).
    pub fairness: Option<Arc<dyn FairnessPolicy>>,
    /// Background work the app starts after loading (e.g. KV-event subscriptions).
    pub background: Option<Arc<dyn BackgroundService>>,
    /// The asynchronous tokenize step `scheduling::stage` awaits before the decision (a
    /// `token-producer` with a tokenizer backend); the first in producer order runs.
    pub tokenize_step: Option<Arc<crate::tokenize::Tokenizer>>,
    /// A latency prediction `scheduling::stage` awaits before the decision.
    pub latency_step: Option<LatencyStep>,
    /// A prefix lookup `scheduling::stage` awaits before the decision (shared index).
    pub prefix_prefetch: Option<Arc<dyn PrefixPrefetch>>,
    /// Encoder-cache sizes a latency step may bind.
    pub encoder_cache_sizer: Option<Arc<dyn EncoderCacheSizer>>,
    /// Request-parser role (named from `parser` / `requestHandler.parsers`).
    pub parser: Option<crate::request::parsers::ParserKind>,
    /// Kubernetes object notifications other plugins may subscribe to.
    pub notification_source: Option<Arc<dyn NotificationSource>>,
    /// A data-layer or policy plugin that the scheduler itself does not call (metrics
    /// sources, extractors, flow-control policies).
    pub passive: bool,
}

impl PluginInstance {
    /// An instance with no roles yet.
    pub fn new(name: PluginName, type_name: &'static str) -> Self {
        Self {
            name,
            type_name,
            profile_handler: None,
            filter: None,
            scorer: None,
            picker: None,
            producer: None,
            pre_request: None,
            response: None,
            consumer: None,
            saturation: None,
            decider: None,
            admitter: None,
            fairness: None,
            background: None,
            tokenize_step: None,
            latency_step: None,
            prefix_prefetch: None,
            encoder_cache_sizer: None,
            parser: None,
            notification_source: None,
            passive: false,
        }
    }

    /// Adds the profile-handler role.
    pub fn with_profile_handler(mut self, p: Arc<dyn ProfileHandler>) -> Self {
        self.profile_handler = Some(p);
        self
    }
    /// Adds the filter role.
    pub fn with_filter(mut self, p: Arc<dyn Filter>) -> Self {
        self.filter = Some(p);
        self
    }
    /// Adds the scorer role.
    pub fn with_scorer(mut self, p: Arc<dyn Scorer>) -> Self {
        self.scorer = Some(p);
        self
    }
    /// Adds the picker role.
    pub fn with_picker(mut self, p: Arc<dyn Picker>) -> Self {
        self.picker = Some(p);
        self
    }
    /// Adds the producer role.
    pub fn with_producer(mut self, p: Arc<dyn DataProducer>) -> Self {
        self.producer = Some(p);
        self
    }
    /// Adds the pre-request role.
    pub fn with_pre_request(mut self, p: Arc<dyn PreRequest>) -> Self {
        self.pre_request = Some(p);
        self
    }
    /// Adds the response role.
    pub fn with_response(mut self, p: Arc<dyn ResponseHook>) -> Self {
        self.response = Some(p);
        self
    }
    /// Declares consumed data.
    pub fn with_consumer(mut self, p: Arc<dyn Consumer>) -> Self {
        self.consumer = Some(p);
        self
    }
    /// Adds the saturation-detector role.
    pub fn with_saturation(mut self, p: Arc<dyn SaturationDetector>) -> Self {
        self.saturation = Some(p);
        self
    }
    /// Adds the decider role.
    pub fn with_decider(mut self, p: Arc<dyn Decider>) -> Self {
        self.decider = Some(p);
        self
    }
    /// Adds the admitter role.
    pub fn with_admitter(mut self, p: Arc<dyn Admitter>) -> Self {
        self.admitter = Some(p);
        self
    }
    /// Adds the Flow Control fairness-policy role.
    pub fn with_fairness(mut self, p: Arc<dyn FairnessPolicy>) -> Self {
        self.fairness = Some(p);
        self
    }
    /// Adds a background service.
    pub fn with_background(mut self, p: Arc<dyn BackgroundService>) -> Self {
        self.background = Some(p);
        self
    }
    /// Adds the tokenize step awaited before the decision.
    pub fn with_tokenize_step(mut self, t: Arc<crate::tokenize::Tokenizer>) -> Self {
        self.tokenize_step = Some(t);
        self
    }
    /// Adds a prefix lookup awaited before the decision.
    pub fn with_prefix_prefetch(mut self, step: Arc<dyn PrefixPrefetch>) -> Self {
        self.prefix_prefetch = Some(step);
        self
    }

    /// Adds a latency prediction awaited before the decision.
    pub fn with_latency_step(mut self, step: LatencyStep) -> Self {
        self.latency_step = Some(step);
        self
    }
    /// Adds the encoder-cache sizer a latency step may bind.
    pub fn with_encoder_cache_sizer(mut self, p: Arc<dyn EncoderCacheSizer>) -> Self {
        self.encoder_cache_sizer = Some(p);
        self
    }
    /// Adds the request-parser role.
    pub fn with_parser(mut self, kind: crate::request::parsers::ParserKind) -> Self {
        self.parser = Some(kind);
        self
    }

    /// Adds the notification-source role.
    pub fn with_notification_source(mut self, p: Arc<dyn NotificationSource>) -> Self {
        self.notification_source = Some(p);
        self
    }
    /// Marks the plugin as passive (data layer / policy).
    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    /// Human-readable list of roles, for errors ("scorer, pre-request").
    pub fn roles(&self) -> String {
        let roles = [
            (self.profile_handler.is_some(), "profile handler"),
            (self.filter.is_some(), "filter"),
            (self.scorer.is_some(), "scorer"),
            (self.picker.is_some(), "picker"),
            (self.producer.is_some(), "data producer"),
            (self.pre_request.is_some(), "pre-request hook"),
            (self.response.is_some(), "response hook"),
            (self.saturation.is_some(), "saturation detector"),
            (self.decider.is_some(), "decider"),
            (self.admitter.is_some(), "admitter"),
            (self.fairness.is_some(), "fairness policy"),
            (self.parser.is_some(), "request parser"),
            (self.notification_source.is_some(), "notification source"),
            (self.passive, "data-layer/policy plugin"),
        ];
        roles.iter().filter(|(has, _)| *has).map(|(_, name)| *name).collect::<Vec<_>>().join(", ")
    }
}
