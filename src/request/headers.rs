//! Header and metadata key constants of the EPP protocol (GIE and llm-d spellings), and the
//! typed view of the request headers Envoy sends (`RequestHeaders`).

/// Destination header and `envoy.lb` metadata key.
pub const DESTINATION_ENDPOINT: &str = "x-gateway-destination-endpoint";
/// Dynamic-metadata namespace of the destination.
pub const LB_METADATA_NAMESPACE: &str = "envoy.lb";
/// Metadata namespace of the gateway's subset hint.
pub const SUBSET_HINT_NAMESPACE: &str = "envoy.lb.subset_hint";
/// Key of the subset list inside [`SUBSET_HINT_NAMESPACE`].
pub const SUBSET_HINT_KEY: &str = "x-gateway-destination-endpoint-subset";
/// Served-endpoint key in the `envoy.lb` namespace on response messages.
pub const DESTINATION_ENDPOINT_SERVED: &str = "x-gateway-destination-endpoint-served";
/// Request id.
pub const REQUEST_ID: &str = "x-request-id";
/// Target model override (GIE).
pub const MODEL_NAME_REWRITE: &str = "x-gateway-model-name-rewrite";
/// Target model override (llm-d).
pub const MODEL_NAME_REWRITE_LLMD: &str = "x-llm-d-model-name-rewrite";
/// Objective name (priority).
pub const OBJECTIVE: &str = "x-gateway-inference-objective";
/// Objective name (llm-d).
pub const OBJECTIVE_LLMD: &str = "x-llm-d-inference-objective";
/// Fairness id.
pub const FAIRNESS_ID: &str = "x-gateway-inference-fairness-id";
/// Fairness id (llm-d).
pub const FAIRNESS_ID_LLMD: &str = "x-llm-d-inference-fairness-id";
/// Prefill endpoint for the decode sidecar.
pub const PREFILLER_HOST_PORT: &str = "x-prefiller-host-port";
/// Encoder endpoints for the decode sidecar.
pub const ENCODER_HOSTS_PORTS: &str = "x-encoder-hosts-ports";
/// Chosen data-parallel rank for the sidecar (deprecated data-parallel handler).
pub const DATA_PARALLEL_HOST_PORT: &str = "x-data-parallel-host-port";
/// Session-affinity token on responses (base64 of the endpoint id), echoed by clients.
pub const SESSION_TOKEN: &str = "x-session-token";
/// Content length.
pub const CONTENT_LENGTH: &str = "content-length";
/// Debug marker GIE sets on response headers.
pub const WENT_INTO_RESP_HEADERS: &str = "x-went-into-resp-headers";

/// Headers the EPP owns: never echoed back, stripped from the upstream request.
pub const SYSTEM_OWNED: &[&str] = &[
    FAIRNESS_ID,
    FAIRNESS_ID_LLMD,
    OBJECTIVE,
    OBJECTIVE_LLMD,
    MODEL_NAME_REWRITE,
    MODEL_NAME_REWRITE_LLMD,
    SUBSET_HINT_KEY,
    DESTINATION_ENDPOINT,
    DESTINATION_ENDPOINT_SERVED,
    CONTENT_LENGTH,
];

/// True when `name` (lower-case) is system-owned.
pub fn is_system_owned(name: &str) -> bool {
    SYSTEM_OWNED.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Request headers as Envoy sent them (keys lower-case, values decoded as UTF-8 lossily).
#[derive(Clone, Debug, Default)]
pub struct RequestHeaders {
    /// All headers in arrival order.
    pub all: Vec<(String, String)>,
}

impl RequestHeaders {
    /// First value of a header (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.all.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// First non-empty value among several spellings.
    pub fn get_any(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| self.get(n).filter(|v| !v.is_empty()))
    }

    /// The request path (`:path`, else `x-original-path`, else `x-forwarded-path`).
    pub fn path(&self) -> &str {
        self.get_any(&[":path", "x-original-path", "x-forwarded-path"]).unwrap_or("/v1/completions")
    }

    /// True for a gRPC request (`content-type: application/grpc`, `application/grpc+proto`,
    /// ...): failures are then answered with a gRPC status.
    pub fn is_grpc(&self) -> bool {
        self.get("content-type").is_some_and(|ct| {
            let ct = ct.trim().to_ascii_lowercase();
            ct == "application/grpc" || ct.starts_with("application/grpc+") || ct.starts_with("application/grpc;")
        })
    }

    /// The target model override header, if any.
    pub fn model_rewrite(&self) -> Option<&str> {
        self.get_any(&[MODEL_NAME_REWRITE_LLMD, MODEL_NAME_REWRITE])
    }

    /// The objective header, if any.
    pub fn objective(&self) -> Option<&str> {
        self.get_any(&[OBJECTIVE_LLMD, OBJECTIVE])
    }

    /// The fairness id header (llm-d spelling first), if any.
    pub fn fairness_id(&self) -> Option<&str> {
        self.get_any(&[FAIRNESS_ID_LLMD, FAIRNESS_ID])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_requests_are_recognised_by_content_type() {
        let with = |ct: &str| RequestHeaders { all: vec![("content-type".into(), ct.into())] };
        for ct in ["application/grpc", "application/grpc+proto", "Application/GRPC; charset=x"] {
            assert!(with(ct).is_grpc(), "{ct}");
        }
        for ct in ["application/json", "application/grpc-web", "text/plain"] {
            assert!(!with(ct).is_grpc(), "{ct}");
        }
        assert!(!RequestHeaders::default().is_grpc());
    }
}
