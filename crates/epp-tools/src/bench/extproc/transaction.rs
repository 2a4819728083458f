//! One benchmark request: an ext_proc stream on a shared HTTP/2 connection, driven like Envoy
//! drives it, and checked: the routing decision (`x-gateway-destination-endpoint`) must
//! arrive, and in full-duplex mode the whole body must come back as `streamed_response`
//! chunks ending with `end_of_stream`.

use tokio_stream::StreamExt;
use tonic::transport::Channel;

use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp::proto::ext_proc::processing_response::Response;
use epp::proto::ext_proc::{CommonResponse, ProcessingRequest, ProcessingResponse, body_mutation};
use epp::request::headers::DESTINATION_ENDPOINT;

use super::args::BodyMode;

/// A stream whose decision has arrived; the caller drains it to its end off the clock.
pub type Open = tonic::Streaming<ProcessingResponse>;

/// Sends `messages` on a new stream and waits until the request is fully answered: the
/// destination and, in full duplex, the echo of all `body_len` bytes. Returns the destination.
pub async fn decide(
    mut client: ExternalProcessorClient<Channel>,
    messages: Vec<ProcessingRequest>,
    mode: BodyMode,
    body_len: usize,
) -> Result<(String, Open), String> {
    let mut replies = client.process(tokio_stream::iter(messages)).await.map_err(|s| status(&s))?.into_inner();
    let first = next(&mut replies).await?;
    let destination = match mode {
        BodyMode::FullDuplex => {
            let dest = destination(&first, true)?;
            let echoed = echo(&mut replies).await?;
            if echoed != body_len {
                return Err(format!("body echo has {echoed} bytes, sent {body_len}"));
            }
            dest
        }
        BodyMode::Buffered => match &first.response {
            Some(Response::RequestHeaders(_)) => destination(&next(&mut replies).await?, false)?,
            _ => return Err(destination(&first, true).err().unwrap_or_else(|| "routed before the body".into())),
        },
    };
    Ok((destination, replies))
}

/// Reads to the end of the stream (the server closes it after the client half-closed).
pub async fn drain(mut replies: Open) {
    while let Some(Ok(_)) = replies.next().await {}
}

async fn next(replies: &mut Open) -> Result<ProcessingResponse, String> {
    match replies.next().await {
        Some(Ok(r)) => Ok(r),
        Some(Err(s)) => Err(status(&s)),
        None => Err("stream ended before the decision".into()),
    }
}

fn status(s: &tonic::Status) -> String {
    format!("grpc {:?}: {}", s.code(), s.message())
}

/// The destination header of a request-headers (`headers`) or request-body reply.
fn destination(reply: &ProcessingResponse, headers: bool) -> Result<String, String> {
    let common = match (&reply.response, headers) {
        (Some(Response::RequestHeaders(h)), true) => h.response.as_ref(),
        (Some(Response::RequestBody(b)), false) => b.response.as_ref(),
        (Some(Response::ImmediateResponse(i)), _) => {
            return Err(format!("immediate response {}", i.status.as_ref().map_or(0, |s| s.code)));
        }
        (other, _) => return Err(format!("unexpected reply {:?}", other.as_ref().map(kind))),
    };
    common
        .and_then(|c| c.header_mutation.as_ref())
        .and_then(|m| m.set_headers.iter().filter_map(|h| h.header.as_ref()).find(|h| h.key == DESTINATION_ENDPOINT))
        .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
        .filter(|d| !d.is_empty())
        .ok_or_else(|| "no destination header".into())
}

/// Bytes of streamed body echo up to and including the chunk with `end_of_stream`.
async fn echo(replies: &mut Open) -> Result<usize, String> {
    let mut total = 0;
    loop {
        let reply = next(replies).await?;
        let streamed = match &reply.response {
            Some(Response::RequestBody(b)) => b.response.as_ref().and_then(streamed_chunk),
            _ => None,
        };
        let (len, end) = streamed.ok_or_else(|| "expected a streamed body chunk".to_string())?;
        total += len;
        if end {
            return Ok(total);
        }
    }
}

fn streamed_chunk(c: &CommonResponse) -> Option<(usize, bool)> {
    match c.body_mutation.as_ref()?.mutation.as_ref()? {
        body_mutation::Mutation::StreamedResponse(s) => Some((s.body.len(), s.end_of_stream)),
        _ => None,
    }
}

fn kind(r: &Response) -> &'static str {
    match r {
        Response::RequestHeaders(_) => "request_headers",
        Response::RequestBody(_) => "request_body",
        Response::RequestTrailers(_) => "request_trailers",
        Response::ResponseHeaders(_) => "response_headers",
        Response::ResponseBody(_) => "response_body",
        Response::ResponseTrailers(_) => "response_trailers",
        Response::ImmediateResponse(_) => "immediate_response",
    }
}
