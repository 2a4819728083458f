//! The tonic `ExternalProcessor` service: one task per gRPC stream drives a
//! `StreamProcessor` and forwards its replies through a bounded channel. A stream that ends
//! (client half-close, cancel, transport error) still runs completion accounting; a client
//! that cancels while a message is being handled (e.g. queued by Flow Control) stops it.
//!
//! Idle streams (`--idle-stream-timeout`): a stream is idle while epp waits for the client's
//! next message, having handled every earlier one (its replies handed to the transport). Time
//! spent handling a message (parsing, tokenizing, waiting for Flow Control admission,
//! scheduling) never counts, and each message received restarts the clock. Idle that long,
//! the stream ends with `DEADLINE_EXCEEDED` (the server's time limit ran out; `CANCELLED` would
//! say the caller gave up) and is counted in `epp_extproc_streams_closed_total{reason}`. The
//! wait for the upstream's response headers (and between response chunks) is idle by this
//! definition: epp holds nothing of the request then, and the client, Envoy, sends nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use super::stream::StreamProcessor;
use super::streams::StreamTracker;
use crate::endpoints::store::EndpointStore;
use crate::proto::ext_proc::external_processor_server::ExternalProcessor;
use crate::proto::ext_proc::{ProcessingRequest, ProcessingResponse};
use crate::scheduling::handle::SchedulerHandle;
use crate::telemetry::metrics::RequestMetrics;

/// Replies buffered per stream before the processor waits for Envoy to read.
const REPLY_BUFFER: usize = 32;

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
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(REPLY_BUFFER);
        let mut processor = StreamProcessor::new(self.shared.clone());
        let span = info_span!("extproc_stream");
        let mut guard = self.streams.start();
        let idle = self.shared.options.idle_stream_timeout;
        tokio::spawn(
            async move {
                loop {
                    let Ok(next) = next_message(&mut inbound, idle).await else {
                        let idle = idle.unwrap_or_default();
                        info!(?idle, "ext_proc stream idle; ending it with DEADLINE_EXCEEDED");
                        guard.idle_timeout();
                        let message = format!("no message on the stream for {idle:?} (--idle-stream-timeout)");
                        let _ = tx.send(Err(Status::deadline_exceeded(message))).await;
                        break;
                    };
                    let msg = match next {
                        Ok(Some(m)) => m,
                        Ok(None) => {
                            guard.ok();
                            break;
                        }
                        Err(status) => {
                            let Some(error) = crate::extproc::error::ExtProcError::from_inbound_status(&status) else {
                                debug!(%status, "ext_proc stream ended with an error");
                                break;
                            };
                            warn!(%status, "Undecodable ext_proc message; failing the stream");
                            let ended = error.stream_status();
                            for reply in processor.fail_undecodable(error) {
                                let _ = tx.send(Ok(reply)).await;
                            }
                            let _ = tx.send(Err(ended)).await;
                            break;
                        }
                    };
                    // The reply stream closes when the client cancels (e.g. Envoy resets the
                    // stream): stop waiting, which withdraws a request queued by Flow Control.
                    guard.received();
                    let trace = processor.trace_span();
                    let replies = tokio::select! {
                        replies = tracing::Instrument::instrument(processor.handle(msg), trace) => replies,
                        () = tx.closed() => break,
                    };
                    for reply in replies {
                        if tx.send(Ok(reply)).await.is_err() {
                            processor.complete();
                            return;
                        }
                        guard.sent();
                    }
                    if processor.is_closed() {
                        guard.ok();
                        break;
                    }
                }
                processor.complete();
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
