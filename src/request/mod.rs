//! Request side: header constants (`headers`), the OpenAI-style body parser (`openai`), the
//! configured parser selection and the non-OpenAI parsers (`parsers`), multimodal item
//! identity (`multimodal`), the `estimate` token backend, response usage and model-name restore
//! (`usage`), and the typed request the scheduler sees (`InferenceRequest`). Only this module
//! tree reads or writes body JSON; the scheduler sees `ParsedBody`, token ids and media item
//! hashes, never raw bytes.

pub mod estimate;
pub mod headers;
pub mod multimodal;
pub mod openai;
pub mod parsers;
pub mod usage;

use headers::RequestHeaders;
use openai::ParsedBody;

/// One inference request as the scheduler sees it.
#[derive(Clone, Debug, Default)]
pub struct InferenceRequest {
    /// `x-request-id` (generated when absent).
    pub request_id: String,
    /// Request headers.
    pub headers: RequestHeaders,
    /// `model` from the body (empty for body-less requests).
    pub incoming_model: String,
    /// Model after `x-gateway-model-name-rewrite` (equals `incoming_model` otherwise).
    pub target_model: String,
    /// The parsed body, when the request had one the parser understood.
    pub body: Option<ParsedBody>,
    /// Size of the request body in bytes.
    pub body_len: usize,
    /// Priority from the objective (negative = sheddable).
    pub priority: i32,
    /// What the gateway's response-headers message said about the endpoint that served the
    /// request (`envoy.lb` metadata); set just before the response hooks run.
    pub served: ServedEndpoint,
}

/// The served endpoint the gateway reports on the response path, in `metadata_context`
/// `filter_metadata["envoy.lb"]["x-gateway-destination-endpoint-served"]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServedEndpoint {
    /// No `envoy.lb` metadata on the response (or no response yet).
    #[default]
    NoLbMetadata,
    /// `envoy.lb` present without the served key (or with a non-string value).
    NoServedKey,
    /// The served endpoint, as the gateway wrote it (`ip:port`).
    Endpoint(String),
}
