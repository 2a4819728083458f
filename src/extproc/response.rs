//! Builders of `ProcessingResponse` messages: header mutations (values in `raw_value` only),
//! the destination metadata under `envoy.lb`, response-hook metadata, body echo chunks of at most 62000 bytes, and
//! immediate (error) responses.

use prost_types::value::Kind;
use prost_types::{Struct, Value};

use super::error::{ExtProcError, Status};
use crate::framework::result::MetadataEdits;
use crate::proto::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use crate::proto::envoy::r#type::v3::HttpStatus;
use crate::proto::ext_proc::processing_response::Response;
use crate::proto::ext_proc::{
    BodyMutation, BodyResponse, CommonResponse, GrpcStatus, HeaderMutation, HeadersResponse, ImmediateResponse,
    ProcessingResponse, StreamedBodyResponse, TrailersResponse, body_mutation,
};
use crate::request::headers::{DESTINATION_ENDPOINT, LB_METADATA_NAMESPACE};

/// Largest body chunk sent back in full-duplex mode (GIE's `BodyByteLimit`).
pub const BODY_CHUNK_LIMIT: usize = 62_000;

/// A header to set, with the value in `raw_value` only (Envoy rejects both being set).
pub fn header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: key.to_string(), value: String::new(), raw_value: value.as_bytes().to_vec() }),
        ..Default::default()
    }
}

/// A header mutation from (name, value) pairs and names to remove.
pub fn mutation(set: &[(String, String)], remove: &[String]) -> HeaderMutation {
    HeaderMutation { set_headers: set.iter().map(|(k, v)| header(k, v)).collect(), remove_headers: remove.to_vec() }
}

/// `{"envoy.lb": {"x-gateway-destination-endpoint": dest}}`.
pub fn destination_metadata(destination: &str) -> Struct {
    let inner = Struct {
        fields: [(DESTINATION_ENDPOINT.to_string(), Value { kind: Some(Kind::StringValue(destination.to_string())) })]
            .into(),
    };
    Struct { fields: [(LB_METADATA_NAMESPACE.to_string(), Value { kind: Some(Kind::StructValue(inner)) })].into() }
}

/// Response-hook metadata as a `Struct`: `{namespace: {key: number}}`.
pub fn metadata_struct(edits: &MetadataEdits) -> Struct {
    let namespace = |keys: &std::collections::BTreeMap<String, f64>| {
        let fields = keys.iter().map(|(k, v)| (k.clone(), Value { kind: Some(Kind::NumberValue(*v)) })).collect();
        Value { kind: Some(Kind::StructValue(Struct { fields })) }
    };
    Struct { fields: edits.namespaces.iter().map(|(ns, keys)| (ns.clone(), namespace(keys))).collect() }
}

fn message(response: Response) -> ProcessingResponse {
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// A request-headers reply.
pub fn request_headers(common: CommonResponse) -> ProcessingResponse {
    message(Response::RequestHeaders(HeadersResponse { response: Some(common) }))
}

/// A response-headers reply.
pub fn response_headers(common: CommonResponse) -> ProcessingResponse {
    message(Response::ResponseHeaders(HeadersResponse { response: Some(common) }))
}

/// A request-body reply with a common response.
pub fn request_body(common: CommonResponse) -> ProcessingResponse {
    message(Response::RequestBody(BodyResponse { response: Some(common) }))
}

/// A response-body reply with a common response.
pub fn response_body(common: CommonResponse) -> ProcessingResponse {
    message(Response::ResponseBody(BodyResponse { response: Some(common) }))
}

/// A request-trailers reply.
pub fn request_trailers() -> ProcessingResponse {
    message(Response::RequestTrailers(TrailersResponse::default()))
}

/// A response-trailers reply.
pub fn response_trailers() -> ProcessingResponse {
    message(Response::ResponseTrailers(TrailersResponse::default()))
}

/// Which direction a streamed body belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Request body.
    Request,
    /// Response body.
    Response,
}

/// One `streamed_response` chunk.
pub fn streamed_chunk(direction: Direction, body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
    let common = CommonResponse {
        body_mutation: Some(BodyMutation {
            mutation: Some(body_mutation::Mutation::StreamedResponse(StreamedBodyResponse { body, end_of_stream })),
        }),
        ..Default::default()
    };
    match direction {
        Direction::Request => request_body(common),
        Direction::Response => response_body(common),
    }
}

/// `body` split into chunks of at most [`BODY_CHUNK_LIMIT`] bytes; `end_of_stream` is set on
/// the last chunk when `eos` is true. An empty body is one empty chunk.
pub fn chunked_body(direction: Direction, body: &[u8], eos: bool) -> Vec<ProcessingResponse> {
    if body.is_empty() {
        return vec![streamed_chunk(direction, Vec::new(), eos)];
    }
    let n = body.len().div_ceil(BODY_CHUNK_LIMIT);
    body.chunks(BODY_CHUNK_LIMIT)
        .enumerate()
        .map(|(i, c)| streamed_chunk(direction, c.to_vec(), eos && i + 1 == n))
        .collect()
}

/// [`chunked_body`] of an owned body: a body within one chunk is moved into it, not copied.
pub fn chunked_body_owned(direction: Direction, body: Vec<u8>, eos: bool) -> Vec<ProcessingResponse> {
    if body.len() <= BODY_CHUNK_LIMIT {
        return vec![streamed_chunk(direction, body, eos)];
    }
    chunked_body(direction, &body, eos)
}

/// A buffered-mode body replacement.
pub fn body_replacement(body: Vec<u8>) -> BodyMutation {
    BodyMutation { mutation: Some(body_mutation::Mutation::Body(body)) }
}

/// The immediate response for a failure of a gRPC request (`content-type: application/grpc*`):
/// `grpc_status` set (Envoy answers trailers-only with it), plus `grpc-status` and
/// `grpc-message` (percent-encoded, as the gRPC spec requires) and a gRPC content type; the
/// HTTP status and text body are those of [`immediate`].
pub fn immediate_grpc(error: &ExtProcError) -> ProcessingResponse {
    let mut reply = immediate(error);
    if let Some(Response::ImmediateResponse(r)) = &mut reply.response {
        r.grpc_status = Some(GrpcStatus { status: error.grpc_status() });
        let headers = [
            ("content-type".to_string(), "application/grpc".to_string()),
            ("grpc-status".to_string(), error.grpc_status().to_string()),
            ("grpc-message".to_string(), grpc_message(&error.body())),
        ];
        let set = &mut r.headers.get_or_insert_with(Default::default).set_headers;
        set.retain(|h| h.header.as_ref().is_none_or(|v| v.key != "content-type"));
        set.extend(headers.iter().map(|(k, v)| header(k, v)));
    }
    reply
}

/// Percent-encodes a `grpc-message` value (bytes outside printable ASCII, and `%`).
fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The immediate response for a failure.
pub fn immediate(error: &ExtProcError) -> ProcessingResponse {
    let mut headers = vec![("content-type".to_string(), "text/plain".to_string())];
    if error.status() == Status::ResourceExhausted {
        headers.push(("x-llm-d-request-dropped-reason".to_string(), "rejected-saturated".to_string()));
    }
    message(Response::ImmediateResponse(ImmediateResponse {
        status: Some(HttpStatus { code: i32::from(error.http_status()) }),
        headers: Some(mutation(&headers, &[])),
        body: error.body().into_bytes(),
        grpc_status: None,
        details: format!("epp_{}", error.code()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk_of(r: &ProcessingResponse) -> (usize, bool) {
        let Some(Response::RequestBody(b)) = &r.response else { panic!("not a body reply") };
        let Some(body_mutation::Mutation::StreamedResponse(s)) =
            b.response.as_ref().and_then(|c| c.body_mutation.as_ref()).and_then(|m| m.mutation.as_ref())
        else {
            panic!("not streamed")
        };
        (s.body.len(), s.end_of_stream)
    }

    #[test]
    fn chunks_respect_the_limit_and_mark_only_the_last() {
        let body = vec![b'x'; 153_600];
        let chunks: Vec<_> = chunked_body(Direction::Request, &body, true).iter().map(chunk_of).collect();
        assert_eq!(chunks, vec![(62_000, false), (62_000, false), (29_600, true)]);
        let chunks: Vec<_> = chunked_body(Direction::Request, &body, false).iter().map(chunk_of).collect();
        assert!(chunks.iter().all(|(_, eos)| !eos));
        assert_eq!(
            chunked_body(Direction::Request, b"", true).iter().map(chunk_of).collect::<Vec<_>>(),
            vec![(0, true)]
        );
    }

    #[test]
    fn grpc_failures_carry_a_grpc_status_and_an_encoded_message() {
        let reply = immediate_grpc(&ExtProcError::BadRequest("bad frame: 100% ü".into()));
        let Some(Response::ImmediateResponse(r)) = reply.response else { panic!("not immediate") };
        assert_eq!(r.grpc_status, Some(GrpcStatus { status: 3 }));
        let get = |k: &str| {
            let set = &r.headers.as_ref().unwrap().set_headers;
            let values: Vec<_> = set.iter().filter_map(|h| h.header.as_ref()).filter(|h| h.key == k).collect();
            assert_eq!(values.len(), 1, "{k} set once");
            String::from_utf8(values[0].raw_value.clone()).unwrap()
        };
        assert_eq!(get("content-type"), "application/grpc");
        assert_eq!(get("grpc-status"), "3");
        assert_eq!(get("grpc-message"), "inference error: BadRequest - bad frame: 100%25 %C3%BC");
        assert_eq!(ExtProcError::ServiceUnavailable(String::new()).grpc_status(), 14);
        assert_eq!(ExtProcError::ResourceExhausted(String::new()).grpc_status(), 8);
        assert_eq!(ExtProcError::Internal(String::new()).grpc_status(), 13);
    }

    #[test]
    fn headers_use_raw_value_only() {
        let h = header("x-gateway-destination-endpoint", "10.0.0.1:8000");
        let v = h.header.unwrap();
        assert!(v.value.is_empty());
        assert_eq!(v.raw_value, b"10.0.0.1:8000");
    }
}
