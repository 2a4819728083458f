//! The floor (`--floor`, `epp-tools bench floor-server`): a no-op ext_proc server on the same
//! tonic stack as epp (h2c, `TCP_NODELAY`, epp's HTTP/2 limits and decoding limit) that answers
//! the same message pattern as epp, so what epp costs above it is what epp itself does. Full
//! duplex: the body is held to its end, then a headers reply with the destination header and
//! `envoy.lb` metadata, and the body echoed in chunks of at most 62,000 bytes. Buffered: an
//! empty headers reply at once, then the body reply with the destination. No parsing, no
//! scheduling, and no task, channel or future of its own per stream: the stream's state is
//! the reply stream the transport polls.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

use epp::extproc::response::{self as resp, BODY_CHUNK_LIMIT, Direction};
use epp::proto::ext_proc::external_processor_server::{ExternalProcessor, ExternalProcessorServer};
use epp::proto::ext_proc::processing_request::Request as Message;
use epp::proto::ext_proc::{CommonResponse, ProcessingRequest, ProcessingResponse};
use epp::request::headers::DESTINATION_ENDPOINT;

/// The destination every floor answer names.
pub const FLOOR_DESTINATION: &str = "127.0.0.1:8000";

/// `protocol_config.request_body_mode` of `BUFFERED`.
const BUFFERED: i32 = 2;

/// The no-op service.
#[derive(Clone, Copy, Debug, Default)]
pub struct Floor;

type ReplyStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Floor {
    type ProcessStream = ReplyStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let stream =
            FloorStream { inbound: request.into_inner(), buffered: false, body: Vec::new(), pending: VecDeque::new() };
        Ok(Response::new(Box::pin(stream)))
    }
}

/// One stream's state: the body held so far and replies not yet handed to the transport. It
/// is the reply stream itself, read messages in, replies out.
struct FloorStream {
    inbound: Streaming<ProcessingRequest>,
    buffered: bool,
    body: Vec<u8>,
    pending: VecDeque<ProcessingResponse>,
}

impl Stream for FloorStream {
    type Item = Result<ProcessingResponse, Status>;

    /// The next reply, reading messages until one is due; the reply stream ends when the
    /// client half-closes or the stream fails.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(reply) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(reply)));
            }
            match Pin::new(&mut this.inbound).poll_next(cx) {
                Poll::Ready(Some(Ok(msg))) => this.answer(msg),
                Poll::Ready(_) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl FloorStream {
    /// Queues the replies epp would send for `msg` (module doc).
    fn answer(&mut self, msg: ProcessingRequest) {
        if let Some(pc) = &msg.protocol_config {
            self.buffered = pc.request_body_mode == BUFFERED;
        }
        match msg.request {
            Some(Message::RequestHeaders(_)) if self.buffered => {
                self.pending.push_back(resp::request_headers(CommonResponse::default()));
            }
            Some(Message::RequestBody(b)) if self.buffered => {
                let common = if b.end_of_stream { routed() } else { CommonResponse::default() };
                self.pending.push_back(with_metadata(resp::request_body(common), b.end_of_stream));
            }
            Some(Message::RequestBody(b)) => {
                if self.body.is_empty() {
                    self.body = b.body;
                } else {
                    self.body.extend_from_slice(&b.body);
                }
                if b.end_of_stream {
                    self.pending.push_back(with_metadata(resp::request_headers(routed()), true));
                    let body = std::mem::take(&mut self.body);
                    if body.len() <= BODY_CHUNK_LIMIT {
                        self.pending.push_back(resp::streamed_chunk(Direction::Request, body, true));
                    } else {
                        self.pending.extend(resp::chunked_body(Direction::Request, &body, true));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The routing answer: the destination header, as epp sets it.
fn routed() -> CommonResponse {
    let set = [(DESTINATION_ENDPOINT.to_string(), FLOOR_DESTINATION.to_string())];
    CommonResponse { header_mutation: Some(resp::mutation(&set, &[])), clear_route_cache: true, ..Default::default() }
}

fn with_metadata(mut reply: ProcessingResponse, routed: bool) -> ProcessingResponse {
    if routed {
        reply.dynamic_metadata = Some(resp::destination_metadata(FLOOR_DESTINATION));
    }
    reply
}

/// Serves the floor on `listener` until `stop`, with epp's HTTP/2 settings.
pub async fn serve(listener: TcpIncoming, stop: CancellationToken) -> Result<(), tonic::transport::Error> {
    let settings = epp::app::Settings::loopback();
    let limits = settings.limits;
    tonic::transport::Server::builder()
        .http2_keepalive_interval(limits.http2_keepalive_interval)
        .http2_keepalive_timeout(Some(limits.http2_keepalive_timeout))
        .max_concurrent_streams(limits.max_concurrent_streams)
        .http2_max_local_error_reset_streams(None)
        .add_service(ExternalProcessorServer::new(Floor).max_decoding_message_size(settings.grpc_max_recv_bytes))
        .serve_with_incoming_shutdown(listener, stop.cancelled_owned())
        .await
}

/// A listener on `addr` with `TCP_NODELAY`, as epp's accept loop sets it.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpIncoming> {
    Ok(TcpIncoming::bind(addr)?.with_nodelay(Some(true)))
}

/// `epp-tools bench floor-server`: serves the floor on `addr` until Ctrl-C (or SIGTERM).
pub fn serve_until_ctrl_c(addr: SocketAddr, threads: usize) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("floor-srv")
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = bind(addr)?;
        println!("floor ext_proc server on {}", listener.local_addr()?);
        let stop = CancellationToken::new();
        let served = tokio::spawn(serve(listener, stop.clone()));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.cancel();
        served.await??;
        anyhow::Ok(())
    })
}
