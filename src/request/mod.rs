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
    /// Token ids computed by the asynchronous tokenize step before the decision (see
    /// `tokenize::Tokenizer`); `None` when no tokenizer backend is configured, the prompt
    /// kind is not supported, or tokenization missed its deadline.
    pub tokens: Option<std::sync::Arc<[u32]>>,
    /// Multimodal items as the tokenize step's backend reported them (vLLM render
    /// `features`), with their encoder output sizes; `None` when no backend reported any.
    pub mm_items: Option<std::sync::Arc<[multimodal::MediaItem]>>,
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
