//! The wire-mode routing call: one ext_proc stream per request, driven as Envoy does for a
//! full-duplex streamed request (headers, then the whole body with end of stream), reading
//! replies until one names the destination endpoint. The only file of the simulator that
//! touches the generated Envoy types.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use epp::proto::envoy::config::core::v3::{HeaderMap, HeaderValue};
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp::proto::ext_proc::processing_request::Request;
use epp::proto::ext_proc::processing_response::Response;
use epp::proto::ext_proc::{HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, ProtocolConfiguration};
use epp::request::headers::DESTINATION_ENDPOINT;

/// Envoy's `FULL_DUPLEX_STREAMED` body mode.
const FULL_DUPLEX: i32 = 4;
/// Replies read before giving up on a destination (headers, body, and slack).
const MAX_REPLIES: usize = 4;
/// Bound on one routing call.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a wire routing call failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Could not connect to epp.
    #[error("connecting to epp")]
    Connect(#[source] tonic::transport::Error),
    /// The stream failed.
    #[error("ext_proc stream")]
    Status(#[from] tonic::Status),
    /// epp answered with an immediate response (HTTP status) instead of a destination.
    #[error("epp rejected the request with HTTP {0}")]
    Rejected(i32),
    /// The stream ended, or timed out, without naming a destination.
    #[error("no destination in epp's replies")]
    NoDestination,
}

/// A connected ext_proc client.
pub type Client = ExternalProcessorClient<tonic::transport::Channel>;

/// Connects to epp's ext_proc port.
pub async fn connect(addr: std::net::SocketAddr) -> Result<Client, WireError> {
    ExternalProcessorClient::connect(format!("http://{addr}")).await.map_err(WireError::Connect)
}

/// Sends a completions request with `body` through one ext_proc stream; returns the
/// destination (`ip:port`) epp chose.
pub async fn route(client: &mut Client, body: Vec<u8>) -> Result<String, WireError> {
    let (tx, rx) = mpsc::channel(4);
    let headers = [(":method", "POST"), (":path", "/v1/completions"), ("content-type", "application/json")];
    let first = ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: headers
                    .iter()
                    .map(|(k, v)| HeaderValue {
                        key: (*k).into(),
                        value: String::new(),
                        raw_value: v.as_bytes().to_vec(),
                    })
                    .collect(),
            }),
            end_of_stream: false,
            ..Default::default()
        })),
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: FULL_DUPLEX,
            response_body_mode: FULL_DUPLEX,
            ..Default::default()
        }),
        ..Default::default()
    };
    let body = ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody { body, end_of_stream: true })),
        ..Default::default()
    };
    // The channel holds both messages, so these sends never wait.
    let _ = tx.send(first).await;
    let _ = tx.send(body).await;
    let mut replies = client.process(ReceiverStream::new(rx)).await?.into_inner();
    for _ in 0..MAX_REPLIES {
        let Ok(Some(reply)) = tokio::time::timeout(TIMEOUT, replies.next()).await else { break };
        if let Some(found) = destination(&reply?)? {
            return Ok(found);
        }
    }
    Err(WireError::NoDestination)
}

fn destination(reply: &ProcessingResponse) -> Result<Option<String>, WireError> {
    let common = match reply.response.as_ref() {
        Some(Response::RequestHeaders(h)) => h.response.as_ref(),
        Some(Response::RequestBody(b)) => b.response.as_ref(),
        Some(Response::ImmediateResponse(i)) => {
            return Err(WireError::Rejected(i.status.as_ref().map_or(0, |s| s.code)));
        }
        _ => None,
    };
    let Some(mutation) = common.and_then(|c| c.header_mutation.as_ref()) else { return Ok(None) };
    Ok(mutation.set_headers.iter().filter_map(|o| o.header.as_ref()).find_map(|h| {
        h.key.eq_ignore_ascii_case(DESTINATION_ENDPOINT).then(|| String::from_utf8_lossy(&h.raw_value).into_owned())
    }))
}
