//! epp: an Endpoint Picker for LLM inference.
//!
//! Envoy asks epp over the ext_proc gRPC API which vLLM endpoint should serve each
//! OpenAI-style request; epp parses the body, runs the scheduling pipeline described by an
//! EndpointPickerConfig, and answers with the destination header and `envoy.lb` metadata.
//!
//! Module map:
//! - `extproc`: the ext_proc service and per-stream state machine (the only user of `proto`).
//! - `request`: header constants, body parsing, multimodal item identity, response usage.
//! - `framework`: the layer below scheduler and plugins: extension-point traits,
//!   `PluginInstance`, the build context, `SchedulingContext`, `RequestData`, results.
//! - `scheduling`: the pure scheduling pipeline (profiles, the scheduler, its metrics).
//! - `plugins`: the plugin implementations and the catalogue (`plugins::registry`).
//! - `suggest`: "did you mean" suggestions (a leaf).
//! - `config`: EndpointPickerConfig loading and validation.
//! - `flowcontrol`: admission queueing before scheduling (feature gate `flowControl`), with
//!   its own extension points (`flowcontrol::policy`).
//! - `endpoints`: discovery, the endpoint store, metric scraping.
//! - `k8s`: Kubernetes client, InferencePool/pod discovery into the endpoint store, object
//!   notifications (`k8s-notification-source`).
//! - `kvcache`: vLLM KV events (ZeroMQ, msgpack), block hashing, the sharded prefix index.
//! - `telemetry`: logs, metrics, admin server.
//! - `latency`: client of the latency-predictor sidecars (bulk TTFT/TPOT predictions awaited
//!   before the decision, training samples posted after responses).
//! - `tokenize`: real token ids (in-process tokenizer + chat templates, vLLM render), awaited
//!   by the stream before the decision.
//! - `cel`: the CEL subset evaluator used by `request-attribute-reporter`.
//! - `app`: wiring, servers and shutdown.
//! - `debug_state`: the `/debug/state` snapshot (endpoints, prefix index, KV-event sockets,
//!   Flow Control queues) the admin server serves.
//! - `cli`, `go_flags`: the command line, in the Go EPPs' syntax.
//! - `health`: gRPC health (Check, List) with readiness on the first endpoint sync.
//! - `shutdown`: the bounded SIGTERM drain.
//! - `net`: connection hygiene on every listener (connection cap, handshake and idle timeouts).
//! - `memory`: hands freed heap pages back to the kernel after bursts (glibc `malloc_trim`).
//! - `yaml_limits`: size and nesting limits checked on YAML text before it is parsed (a leaf).
//! - `scrape_flags`: the Go EPPs' scrape flags merged with the data-layer plugins' parameters.
//! - `tls`, `http_client`: TLS of the ext_proc port (rustls, cert reload); outbound HTTP(S).
//! - `validate`: `epp validate` checks of configs and KServe manifests.
//!
//! API for tools: `crates/epp-tools` (the simulator and the benchmarks, binary `epp-tools`)
//! builds on the items below, and only on them; changing one means changing the tools too.
//! - Building a scheduler: `app::load_config` with a `framework::build::BuildContext` over an
//!   `endpoints::store::EndpointStore`, giving a `config::LoadedConfig`;
//!   `scheduling::metrics::SchedulerMetrics::detached`; `extproc::decide::decide` (one
//!   decision, as the stream makes it); `framework::ScheduleError`.
//! - Requests: `request::InferenceRequest`, `request::openai` (parsed bodies),
//!   `request::headers::{RequestHeaders, DESTINATION_ENDPOINT}`.
//! - Endpoints: `endpoints::model::{Endpoint, MetricsState}`, `endpoints::vllm_metrics::
//!   {PodMetrics, vllm_exposition}` (what a simulated pod's `/metrics` serves).
//! - KV events and the index: `kvcache::events`, `kvcache::index`, `kvcache::keys`,
//!   `kvcache::sequence`, `kvcache::{encode_batch, decode_batch}`.
//! - A real server on loopback: `app::{App, Settings}`, the ext_proc client in `proto`.
//! - Determinism: `framework::handles::RandomSource` in `BuildContext::random` (picker tie-breaks
//!   of the simulator); index access: `BuildContext::indexes`.
//! - Logging: `telemetry::tracing::{init_with, level_for_flags}`.
//!
//! Data flow:
//! ```text
//! Envoy --ext_proc--> extproc::stream --body--> request::openai --InferenceRequest-->
//!   scheduling::stage::before_decision (one async stage, each step with a deadline):
//!     [tokenize::Tokenizer --token ids--> InferenceRequest::tokens]
//!     [flowcontrol::FlowController::enqueue_and_wait (gate flowControl)]
//!     [latency::Predictor --TTFT/TPOT per endpoint--> RequestData::predicted (phase 1)]
//!   scheduling::Scheduler [producers -> admitters -> ProfileHandler -> Profile(filters -> scorers -> picker)]
//!   --Decision--> extproc::response --headers + metadata--> Envoy
//! API server --LIST+WATCH--> k8s::watch --pool, pods--> k8s::discovery --Endpoints--> endpoints::store
//! vLLM /metrics --HTTP--> endpoints::scraper --PodMetrics--> endpoints::store
//! vLLM /v1/models --HTTP--> endpoints::served_models --ServedModels--> endpoints::store
//! response usage --> ResponseHook::response_metadata (cel) --> final reply dynamic_metadata
//! vLLM --ZMQ--> kvcache::subscriber --frames--> kvcache::decode --events--> kvcache::index
//! file --> config::raw --> config::loader --> plugins::registry --> Arc<Scheduler>
//! (top-level modules form a DAG: tests/module_graph.rs)
//! ```

pub mod app;
pub mod cel;
pub mod cli;
pub mod config;
pub mod debug_state;
pub mod endpoints;
pub mod extproc;
pub mod file_watch;
pub mod flowcontrol;
pub mod framework;
pub mod go_flags;
pub mod health;
pub mod http_client;
pub mod k8s;
pub mod kvcache;
pub mod latency;
pub mod memory;
pub mod net;
pub mod objectives;
pub mod periodic;
pub mod plugins;
pub mod proto;
pub mod reload;
pub mod replica;
pub mod request;
pub mod scheduling;
pub mod scrape_flags;
pub mod shutdown;
pub mod suggest;
pub mod telemetry;
pub mod tls;
pub mod tokenize;
pub mod validate;
pub mod yaml_limits;

#[cfg(test)]
pub(crate) mod test_util;
