//! The tonic `ExternalProcessor` service: one task per gRPC stream drives a
//! `StreamProcessor` and forwards its replies through a bounded channel. A stream that ends
//! (client half-close, cancel, transport error) still runs completion accounting; a client
//! that cancels while a message is being handled (e.g. queued by Flow Control) stops it.

use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info_span, warn};

use super::stream::StreamProcessor;
use super::streams::StreamTracker;
use crate::endpoints::store::EndpointStore;
use crate::proto::ext_proc::external_processor_server::ExternalProcessor;
use crate::proto::ext_proc::{ProcessingRequest, ProcessingResponse};
use crate::scheduling::scheduler::Scheduler;
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
}

impl Default for ExtProcOptions {
    fn default() -> Self {
        Self { default_buffered: false, disable_subset_filter: false, max_body_bytes: 64 << 20 }
    }
}

/// State shared by every stream.
#[derive(Debug)]
pub struct Shared {
    /// The scheduler (swapped whole on reload).
    pub scheduler: ArcSwap<Scheduler>,
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
        tokio::spawn(
            async move {
                loop {
                    let msg = match inbound.message().await {
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
                            for reply in processor.fail_undecodable(error.clone()) {
                                let _ = tx.send(Ok(reply)).await;
                            }
                            let _ = tx.send(Err(error.stream_status())).await;
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
