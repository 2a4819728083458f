//! The tonic `ExternalProcessor` service. A stream's reply stream is its `StreamProcessor`
//! itself: when the transport (hyper's task for the HTTP/2 stream) asks for the next reply,
//! the next message is read and handled in that task, so a stream costs no task or channel of
//! its own and a request crosses no extra task hand-off. A stream that ends (client
//! half-close, cancel, transport error) still runs completion accounting; a client that
//! cancels while a message is being handled (e.g. queued by Flow Control) stops it: the
//! transport drops the reply stream, and with it the handling.
//!
//! Idle streams (`--idle-stream-timeout`): a stream is idle while epp waits for the client's
//! next message, having handled every earlier one (its replies handed to the transport). Time
//! spent handling a message (parsing, tokenizing, waiting for Flow Control admission,
//! scheduling) never counts, and each message received restarts the clock. Idle that long,
//! the stream ends with `DEADLINE_EXCEEDED` (the server's time limit ran out; `CANCELLED` would
//! say the caller gave up) and is counted in `epp_extproc_streams_closed_total{reason}`. The
//! wait for the upstream's response headers (and between response chunks) is idle by this
//! definition: epp holds nothing of the request then, and the client, Envoy, sends nothing.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use super::stream::StreamProcessor;
use super::streams::{StreamGuard, StreamTracker};
use crate::endpoints::store::EndpointStore;
use crate::proto::ext_proc::external_processor_server::ExternalProcessor;
use crate::proto::ext_proc::{ProcessingRequest, ProcessingResponse};
use crate::scheduling::handle::SchedulerHandle;
use crate::telemetry::metrics::RequestMetrics;

/// Per-process settings of the ext_proc server.
#[derive(Clone, Debug)]
pub struct ExtProcOptions {
    /// Assume BUFFERED request bodies when Envoy sends no `protocol_config`
    /// (`--default-request-body-mode buffered`); otherwise full duplex, as GIE.
    pub default_buffered: bool,
    /// Ignore the gateway's subset hint (`--disable-endpoint-subset-filter`).
    pub disable_subset_filter: bool,
    /// Largest request body accepted (bytes).
    pub max_body_bytes: usize,
    /// A stream idle this long (module doc) ends with `DEADLINE_EXCEEDED`
    /// (`--idle-stream-timeout`; `None`: never).
    pub idle_stream_timeout: Option<Duration>,
}

/// Default `--idle-stream-timeout`: Envoy's default `stream_idle_timeout` of its HTTP streams.
pub const DEFAULT_IDLE_STREAM_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for ExtProcOptions {
    fn default() -> Self {
        Self {
            default_buffered: false,
            disable_subset_filter: false,
            max_body_bytes: 64 << 20,
            idle_stream_timeout: Some(DEFAULT_IDLE_STREAM_TIMEOUT),
        }
    }
}

/// The client's next message, or `Err(())` when none came within `idle` (module doc).
async fn next_message(
    inbound: &mut Streaming<ProcessingRequest>,
    idle: Option<Duration>,
) -> Result<Result<Option<ProcessingRequest>, Status>, ()> {
    match idle {
        Some(idle) => tokio::time::timeout(idle, inbound.message()).await.map_err(|_| ()),
        None => Ok(inbound.message().await),
    }
}

/// State shared by every stream.
#[derive(Debug)]
pub struct Shared {
    /// The scheduler; each stream takes the current one when it starts (swapped whole on
    /// reload, see `SchedulerHandle`).
    pub scheduler: SchedulerHandle,
    /// Endpoints.
    pub store: EndpointStore,
    /// Request metrics.
    pub metrics: Arc<RequestMetrics>,
    /// Options.
    pub options: ExtProcOptions,
    /// Flow Control admission (feature gate `flowControl`); `None` = admit at once.
    pub flow_control: Option<Arc<crate::flowcontrol::FlowController>>,
}

/// The ext_proc service.
#[derive(Clone, Debug)]
pub struct ExtProcService {
    shared: Arc<Shared>,
    streams: Arc<StreamTracker>,
}

impl ExtProcService {
    /// A service over shared state.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared, streams: Arc::default() }
    }

    /// The same service, counting its streams in `streams`.
    pub fn with_stream_tracker(mut self, streams: Arc<StreamTracker>) -> Self {
        self.streams = streams;
        self
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProcService {
    type ProcessStream = ReplyStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let stream = ExtProcStream {
            inbound: request.into_inner(),
            processor: StreamProcessor::new(self.shared.clone()),
            guard: self.streams.start(),
            idle: self.shared.options.idle_stream_timeout,
            pending: VecDeque::new(),
            ending: None,
            done: false,
            span: info_span!("extproc_stream"),
        };
        let replies = futures_util::stream::unfold(stream, |mut s| async move {
            let span = s.span.clone();
            let next = s.next_reply().instrument(span).await?;
            Some((next, s))
        });
        Ok(Response::new(Box::pin(replies)))
    }
}

/// One stream, driven from the transport's task as it asks for the next reply (module doc).
struct ExtProcStream {
    inbound: Streaming<ProcessingRequest>,
    processor: StreamProcessor,
    guard: StreamGuard,
    idle: Option<Duration>,
    /// Replies of the last message not yet handed to the transport.
    pending: VecDeque<ProcessingResponse>,
    /// The status that ends the stream once `pending` is sent.
    ending: Option<Status>,
    /// No more messages are read; the reply stream ends once `pending` and `ending` are out.
    done: bool,
    span: tracing::Span,
}

impl ExtProcStream {
    /// The next reply or ending status; `None` ends the reply stream (status OK).
    async fn next_reply(&mut self) -> Option<Result<ProcessingResponse, Status>> {
        loop {
            if let Some(reply) = self.pending.pop_front() {
                self.guard.sent();
                return Some(Ok(reply));
            }
            if let Some(status) = self.ending.take() {
                return Some(Err(status));
            }
            if self.done {
                self.processor.complete();
                return None;
            }
            self.read_and_handle().await;
        }
    }

    /// Reads one message and queues its replies, or marks the stream done.
    async fn read_and_handle(&mut self) {
        let Ok(next) = next_message(&mut self.inbound, self.idle).await else {
            let idle = self.idle.unwrap_or_default();
            info!(?idle, "ext_proc stream idle; ending it with DEADLINE_EXCEEDED");
            self.guard.idle_timeout();
            let message = format!("no message on the stream for {idle:?} (--idle-stream-timeout)");
            self.ending = Some(Status::deadline_exceeded(message));
            self.done = true;
            return;
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.guard.ok();
                self.done = true;
                return;
            }
            Err(status) => {
                self.done = true;
                let Some(error) = crate::extproc::error::ExtProcError::from_inbound_status(&status) else {
                    debug!(%status, "ext_proc stream ended with an error");
                    return;
                };
                warn!(%status, "Undecodable ext_proc message; failing the stream");
                self.ending = Some(error.stream_status());
                self.pending.extend(self.processor.fail_undecodable(error));
                return;
            }
        };
        self.guard.received();
        let trace = self.processor.trace_span();
        let replies = self.processor.handle(msg).instrument(trace).await;
        self.pending.extend(replies);
        if self.processor.is_closed() {
            self.guard.ok();
            self.done = true;
        }
    }
}

impl Drop for ExtProcStream {
    /// The client went away (reset, cancel) or the stream ended: completion accounting runs
    /// once either way (`complete` is idempotent).
    fn drop(&mut self) {
        self.processor.complete();
    }
}
