//! The per-stream state machine: one gRPC stream is one HTTP request. Request side by body
//! mode: full duplex (hold the headers reply until the body ends, then headers reply with
//! the destination, the body echoed in <= 62000-byte chunks, and a trailers reply if the
//! body ended with trailers), buffered (headers answered at once, the destination in the
//! body reply), headers-only / body-less (destination at once), streamed (no body-aware
//! pick possible: destination at once, each chunk acknowledged). With Flow Control on, a
//! parsed request waits for admission before it is scheduled. Response side: headers,
//! body (SSE chunks echoed as they come, JSON buffered then echoed) and trailers answered in
//! order; usage read for metrics; completion hooks run exactly once, also when the client
//! goes away. Body data after the first end of stream is ignored (Envoy's duplicate-EOS
//! quirk), so a request is never scheduled twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost_types::Struct;
use tracing::{debug, error, info};

use super::decide::{Outcome, prepare, random_endpoint, schedule_prepared};
use super::error::ExtProcError;
use super::response::{self as resp, Direction};
use super::service::Shared;
use crate::framework::result::SchedulingResult;
use crate::proto::envoy::config::core::v3::HeaderMap;
use crate::proto::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use crate::proto::ext_proc::processing_request::Request;
use crate::proto::ext_proc::{CommonResponse, ProcessingRequest, ProcessingResponse};
use crate::request::InferenceRequest;
use crate::request::headers::{self, CONTENT_LENGTH, DESTINATION_ENDPOINT, REQUEST_ID, RequestHeaders};
use crate::request::usage::{SseUsageScanner, Usage};
use crate::scheduling::scheduler::Scheduler;
use crate::scheduling::stage::before_decision;
use crate::telemetry::otel;

mod response_side;

/// Bodies larger than this are parsed and scheduled on the blocking pool.
const OFFLOAD_BODY_BYTES: usize = 256 * 1024;

/// Most bytes reserved from a request's `content-length` before any body byte arrives.
const MAX_BODY_PRE_RESERVE: usize = 64 * 1024;

/// How the request body reaches us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestMode {
    /// `FULL_DUPLEX_STREAMED`.
    FullDuplex,
    /// `BUFFERED` / `BUFFERED_PARTIAL`.
    Buffered,
    /// `NONE`: no body messages.
    HeadersOnly,
    /// `STREAMED`: chunks after the headers reply.
    Streamed,
}

/// How response bodies reach us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseMode {
    /// Echo chunks as `streamed_response`.
    FullDuplex,
    /// One `BodyResponse` per message.
    PerMessage,
}

/// The request body mode of a `protocol_config` value; values this build does not know are
/// treated as full duplex.
fn request_mode(mode: i32) -> RequestMode {
    match BodySendMode::try_from(mode) {
        Ok(BodySendMode::None) => RequestMode::HeadersOnly,
        Ok(BodySendMode::Streamed) => RequestMode::Streamed,
        Ok(BodySendMode::Buffered | BodySendMode::BufferedPartial) => RequestMode::Buffered,
        Ok(BodySendMode::FullDuplexStreamed | BodySendMode::Grpc) | Err(_) => RequestMode::FullDuplex,
    }
}

/// The response body mode of a `protocol_config` value.
fn response_mode(mode: i32) -> ResponseMode {
    match BodySendMode::try_from(mode) {
        Ok(BodySendMode::FullDuplexStreamed | BodySendMode::Grpc) => ResponseMode::FullDuplex,
        _ => ResponseMode::PerMessage,
    }
}

/// Where the request side of a stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestPhase {
    /// No message yet (the first one may carry `protocol_config`).
    New,
    /// Headers or body chunks arriving.
    Receiving,
    /// The request ended (end of stream on headers or body, or request trailers); later body
    /// data is Envoy's duplicate-EOS quirk and never schedules again.
    Ended,
}

/// A scheduled request awaiting its response.
#[derive(Debug)]
struct Scheduled {
    request: InferenceRequest,
    result: Option<SchedulingResult>,
}

/// Per-stream state.
pub struct StreamProcessor {
    shared: Arc<Shared>,
    /// The scheduler current when the stream started; used to its end, also after a reload.
    scheduler: Arc<Scheduler>,
    started: Instant,
    phase: RequestPhase,
    req_mode: RequestMode,
    resp_mode: ResponseMode,
    headers: RequestHeaders,
    metadata: HashMap<String, Struct>,
    body: Vec<u8>,
    scheduled: Option<Scheduled>,
    response_streaming: bool,
    /// `on_first_response_chunk` hooks already ran.
    first_response_chunk_seen: bool,
    response_buffer: Vec<u8>,
    sse: Option<SseUsageScanner>,
    usage: Option<Usage>,
    completed: bool,
    /// The final response message already carried the hooks' dynamic metadata.
    metadata_sent: bool,
    closed: bool,
    /// The request's `gateway.request` span (OpenTelemetry); none until the headers arrive.
    trace: tracing::Span,
}

impl StreamProcessor {
    /// A processor for a new stream.
    pub fn new(shared: Arc<Shared>) -> Self {
        let req_mode = if shared.options.default_buffered { RequestMode::Buffered } else { RequestMode::FullDuplex };
        let resp_mode =
            if shared.options.default_buffered { ResponseMode::PerMessage } else { ResponseMode::FullDuplex };
        Self {
            scheduler: shared.scheduler.current(),
            shared,
            started: Instant::now(),
            phase: RequestPhase::New,
            req_mode,
            resp_mode,
            headers: RequestHeaders::default(),
            metadata: HashMap::new(),
            body: Vec::new(),
            scheduled: None,
            response_streaming: false,
            first_response_chunk_seen: false,
            response_buffer: Vec::new(),
            sse: None,
            usage: None,
            completed: false,
            metadata_sent: false,
            closed: false,
            trace: tracing::Span::none(),
        }
    }

    /// The request's `gateway.request` span (`Span::none()` before the headers or with
    /// tracing off).
    pub fn trace_span(&self) -> tracing::Span {
        self.trace.clone()
    }

    /// True once an immediate response ended the exchange.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Handles one message; returns the replies to send, in order.
    pub async fn handle(&mut self, msg: ProcessingRequest) -> Vec<ProcessingResponse> {
        if self.phase == RequestPhase::New {
            self.phase = RequestPhase::Receiving;
            if let Some(pc) = &msg.protocol_config {
                self.req_mode = request_mode(pc.request_body_mode);
                self.resp_mode = response_mode(pc.response_body_mode);
            }
        }
        if let Some(md) = &msg.metadata_context
            && !md.filter_metadata.is_empty()
        {
            self.metadata = md.filter_metadata.clone();
        }
        let replies = match msg.request {
            Some(Request::RequestHeaders(h)) => self.on_request_headers(h.headers.as_ref(), h.end_of_stream).await,
            Some(Request::RequestBody(b)) => self.on_request_body(b.body, b.end_of_stream).await,
            Some(Request::RequestTrailers(_)) => self.on_request_trailers().await,
            Some(Request::ResponseHeaders(h)) => {
                if let Some(s) = &mut self.scheduled {
                    s.request.served =
                        super::decide::served_endpoint(msg.metadata_context.as_ref().map(|m| &m.filter_metadata));
                }
                self.on_response_headers(h.headers.as_ref(), h.end_of_stream)
            }
            Some(Request::ResponseBody(b)) => self.on_response_body(b.body, b.end_of_stream),
            Some(Request::ResponseTrailers(_)) => {
                let mut reply = resp::response_trailers();
                self.attach_final_metadata(&mut reply);
                self.complete();
                vec![reply]
            }
            None => Vec::new(),
        };
        // In observability mode Envoy expects no replies at all.
        if msg.observability_mode { Vec::new() } else { replies }
    }

    async fn on_request_headers(&mut self, map: Option<&HeaderMap>, end_of_stream: bool) -> Vec<ProcessingResponse> {
        self.headers = read_headers(map);
        ensure_request_id(&mut self.headers);
        info!("x-request-id" = self.headers.get(REQUEST_ID).unwrap_or_default(), "EPP received request");
        self.trace = otel::request_span(&self.headers);
        if let Some(len) = self.headers.get(CONTENT_LENGTH).and_then(|v| v.parse::<usize>().ok()) {
            // The header is the peer's claim: reserve at most a typical body up front and let
            // the buffer grow as bytes really arrive.
            self.body.reserve(len.min(self.shared.options.max_body_bytes).min(MAX_BODY_PRE_RESERVE));
        }
        match (end_of_stream, self.req_mode) {
            (true, _) | (_, RequestMode::HeadersOnly) | (_, RequestMode::Streamed) => {
                if end_of_stream {
                    self.phase = RequestPhase::Ended;
                }
                self.pick_without_body()
            }
            (false, RequestMode::Buffered) => vec![resp::request_headers(CommonResponse::default())],
            (false, RequestMode::FullDuplex) => Vec::new(),
        }
    }

    async fn on_request_body(&mut self, chunk: Vec<u8>, end_of_stream: bool) -> Vec<ProcessingResponse> {
        if self.req_mode == RequestMode::Streamed || self.phase == RequestPhase::Ended {
            // Streamed: the pick was made at the headers; acknowledge each chunk. After the
            // first end of stream: Envoy's duplicate-EOS quirk, never schedule twice.
            return match self.req_mode {
                RequestMode::FullDuplex => Vec::new(),
                _ => vec![resp::request_body(CommonResponse::default())],
            };
        }
        if self.body.len() + chunk.len() > self.shared.options.max_body_bytes {
            let limit = self.shared.options.max_body_bytes;
            return self.fail(ExtProcError::BadRequest(format!("request body larger than {limit} bytes")));
        }
        if self.body.is_empty() && end_of_stream {
            // The whole body in one message (buffered, or a small full-duplex body): keep the
            // decoded buffer instead of copying it.
            self.body = chunk;
        } else {
            self.body.extend_from_slice(&chunk);
        }
        if !end_of_stream {
            return match self.req_mode {
                RequestMode::FullDuplex => Vec::new(),
                _ => vec![resp::request_body(CommonResponse::default())],
            };
        }
        self.phase = RequestPhase::Ended;
        self.schedule_body(false).await
    }

    async fn on_request_trailers(&mut self) -> Vec<ProcessingResponse> {
        if self.req_mode == RequestMode::FullDuplex && self.phase != RequestPhase::Ended && self.scheduled.is_none() {
            self.phase = RequestPhase::Ended;
            return self.schedule_body(true).await;
        }
        vec![resp::request_trailers()]
    }

    /// Parses the whole body, awaits the stage before the decision (`scheduling::stage`:
    /// tokenize, Flow Control admission, latency predictions), schedules, then builds the
    /// replies for the body mode. Large bodies are parsed and scheduled on the blocking pool.
    async fn schedule_body(&mut self, ended_with_trailers: bool) -> Vec<ProcessingResponse> {
        let use_hint = !self.shared.options.disable_subset_filter;
        let body = Bytes::from(std::mem::take(&mut self.body));
        let large = body.len() > OFFLOAD_BODY_BYTES;
        let prepared = if large {
            let scheduler = self.scheduler.clone();
            let (headers, raw, span) = (self.headers.clone(), body.clone(), otel::parse_span());
            let parse = move || span.in_scope(|| prepare(scheduler.parsers(), scheduler.objectives(), &headers, &raw));
            match tokio::task::spawn_blocking(parse).await {
                Ok(p) => p,
                Err(source) => return self.fail(ExtProcError::Task { what: "parsing", source }),
            }
        } else {
            otel::parse_span()
                .in_scope(|| prepare(self.scheduler.parsers(), self.scheduler.objectives(), &self.headers, &body))
        };
        let mut prepared = match prepared {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        let scheduler = self.scheduler.clone();
        // A rendering tokenizer needs OpenAI-style JSON: the wire body, or the parser's
        // stand-in for gRPC and native bodies.
        let tokenize_json = prepared.tokenize_json.take();
        let tokenize_input = || tokenize_json.map_or_else(|| body.clone(), Bytes::from);
        let flow_control = self.shared.flow_control.as_deref();
        let stage = before_decision(&scheduler, flow_control, &self.shared.store, &prepared.request, tokenize_input);
        let director = otel::director_span();
        match tracing::Instrument::instrument(stage, director.clone()).await {
            Ok(awaited) => prepared.awaited = awaited,
            Err(ended) => {
                if let Some(error) = ExtProcError::from_admission(ended) {
                    return self.fail(error);
                }
            }
        }
        let outcome = if large {
            let (store, metadata) = (self.shared.store.clone(), self.metadata.clone());
            let joined = tokio::task::spawn_blocking(move || {
                director.in_scope(|| schedule_prepared(&scheduler, &store, &metadata, prepared, use_hint))
            })
            .await;
            match joined {
                Ok(o) => o,
                Err(source) => return self.fail(ExtProcError::Task { what: "scheduling", source }),
            }
        } else {
            director.in_scope(|| schedule_prepared(&scheduler, &self.shared.store, &self.metadata, prepared, use_hint))
        };
        // The parse and tokenize steps have finished with their clones, so this reuses the
        // allocation.
        let body = Vec::from(body);
        match outcome {
            Ok(outcome) => self.reply_scheduled(outcome, body, ended_with_trailers),
            Err(e) => self.fail(e),
        }
    }

    fn reply_scheduled(
        &mut self,
        outcome: Outcome,
        body: Vec<u8>,
        ended_with_trailers: bool,
    ) -> Vec<ProcessingResponse> {
        let Outcome { request, decision, rewritten_body } = outcome;
        let destination = decision.result.destination();
        let body_len = body.len();
        let upstream = rewritten_body.as_deref().unwrap_or(&body);
        let mut set = vec![(DESTINATION_ENDPOINT.to_string(), destination.clone())];
        if !upstream.is_empty() {
            set.push((CONTENT_LENGTH.to_string(), upstream.len().to_string()));
        }
        set.push((REQUEST_ID.to_string(), request.request_id.clone()));
        set.extend(decision.headers.set.iter().cloned());
        let mut remove = decision.headers.remove.clone();
        remove.extend(control_headers_present(&self.headers));
        let common = CommonResponse {
            header_mutation: Some(resp::mutation(&set, &remove)),
            clear_route_cache: true,
            ..Default::default()
        };
        debug!(
            "x-request-id" = %request.request_id,
            objectiveKey = self.headers.objective().unwrap_or_default(),
            incomingModelName = %request.incoming_model,
            targetModelName = %request.target_model,
            priority = request.priority,
            targetModel = %request.target_model,
            endpoint = %destination,
            "Request handled"
        );
        info!(
            "x-request-id" = %request.request_id,
            modelName = %request.incoming_model,
            targetModelName = %request.target_model,
            "EPP sent request body response(s) to proxy"
        );
        otel::record_request(
            &self.trace,
            &request.incoming_model,
            &request.target_model,
            body_len,
            Some(&request.request_id),
        );
        otel::record_pick(
            &self.trace,
            decision.result.primary().and_then(|p| p.targets.first()).map(|c| &**c.id()).ok_or(""),
        );
        self.shared.metrics.scheduled(&request.incoming_model, &request.target_model, body_len);
        self.response_streaming = request.body.as_ref().is_some_and(|b| b.stream);
        let metadata = resp::destination_metadata(&destination);
        let mut out = Vec::new();
        match self.req_mode {
            RequestMode::Buffered => {
                let mut common = common;
                if let Some(new_body) = rewritten_body {
                    common.body_mutation = Some(resp::body_replacement(new_body));
                }
                let mut reply = resp::request_body(common);
                reply.dynamic_metadata = Some(metadata);
                out.push(reply);
            }
            _ => {
                let mut reply = resp::request_headers(common);
                reply.dynamic_metadata = Some(metadata);
                out.push(reply);
                let upstream = rewritten_body.unwrap_or(body);
                out.extend(resp::chunked_body_owned(Direction::Request, upstream, !ended_with_trailers));
                if ended_with_trailers {
                    out.push(resp::request_trailers());
                }
            }
        }
        self.scheduled = Some(Scheduled { request, result: Some(decision.result) });
        out
    }

    /// Body-less requests (and header-only modes): a random endpoint, at once.
    fn pick_without_body(&mut self) -> Vec<ProcessingResponse> {
        let candidate = match random_endpoint(&self.shared.store) {
            Ok(c) => c,
            Err(e) => return self.fail(e),
        };
        let request = super::decide::base_request(&self.headers);
        let destination = candidate.endpoint.host_port.to_string();
        let set = vec![
            (DESTINATION_ENDPOINT.to_string(), destination.clone()),
            (REQUEST_ID.to_string(), request.request_id.clone()),
        ];
        let common = CommonResponse {
            header_mutation: Some(resp::mutation(&set, &control_headers_present(&self.headers))),
            clear_route_cache: true,
            ..Default::default()
        };
        let mut reply = resp::request_headers(common);
        reply.dynamic_metadata = Some(resp::destination_metadata(&destination));
        self.scheduled = Some(Scheduled { request, result: None });
        vec![reply]
    }

    /// Ends the stream after an inbound message could not be decoded: the immediate response
    /// for `error` (Envoy sends it to the client, or resets the request when its response
    /// already started), unless an immediate response already ended the exchange.
    pub fn fail_undecodable(&mut self, error: ExtProcError) -> Vec<ProcessingResponse> {
        if self.closed {
            return Vec::new();
        }
        self.fail(error)
    }

    fn fail(&mut self, error: ExtProcError) -> Vec<ProcessingResponse> {
        let model = self.scheduled.as_ref().map(|s| s.request.incoming_model.clone()).unwrap_or_default();
        error!(
            "x-request-id" = self.headers.get(REQUEST_ID).unwrap_or_default(),
            error = %error,
            status = error.http_status(),
            "Failed to process request"
        );
        otel::record_pick(&self.trace, Err(error.code()));
        self.shared.metrics.error(&model, &model, error.code());
        self.closed = true;
        if self.headers.is_grpc() { vec![resp::immediate_grpc(&error)] } else { vec![resp::immediate(&error)] }
    }
}

/// Gives the request an `x-request-id` when it has none (or an empty one), as the Go EPPs
/// do before their first log line, so every line and plugin sees the same id.
fn ensure_request_id(headers: &mut RequestHeaders) {
    if headers.get(REQUEST_ID).is_some_and(|v| !v.is_empty()) {
        return;
    }
    headers.all.retain(|(k, _)| k != REQUEST_ID);
    headers.all.push((REQUEST_ID.to_string(), uuid::Uuid::new_v4().to_string()));
}

/// Reads a header map (`raw_value`, falling back to `value`), keys lower-cased.
pub fn read_headers(map: Option<&HeaderMap>) -> RequestHeaders {
    let all = map
        .map(|m| {
            m.headers
                .iter()
                .map(|h| {
                    let value = if h.raw_value.is_empty() {
                        h.value.clone()
                    } else {
                        String::from_utf8_lossy(&h.raw_value).into_owned()
                    };
                    (h.key.to_ascii_lowercase(), value)
                })
                .collect()
        })
        .unwrap_or_default();
    RequestHeaders { all }
}

/// Inbound control headers to strip from the upstream request (never `content-length` or
/// pseudo-headers).
fn control_headers_present(h: &RequestHeaders) -> Vec<String> {
    h.all.iter().map(|(k, _)| k).filter(|k| headers::is_system_owned(k) && *k != CONTENT_LENGTH).cloned().collect()
}
