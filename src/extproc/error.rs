//! The single mapping from request-processing failures to the wire: an `ImmediateResponse`
//! with HTTP status and body `inference error: <Code> - <Msg>` (GIE's format and codes).

use crate::flowcontrol::Outcome;
use crate::framework::ScheduleError;
use crate::request::openai::BodyError;
use crate::request::parsers::ParseError;

/// A request-processing failure that ends the request with an immediate response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExtProcError {
    /// Malformed body, missing or non-string `model`, failed validation -> 400.
    #[error("{0}")]
    BadRequest(String),
    /// No candidate endpoint (empty pool, or the subset hint matched none) -> 503.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// Every candidate filtered out, or a sheddable request while saturated -> 429.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A request (or an ext_proc message) above the size limit -> 413; gRPC
    /// `RESOURCE_EXHAUSTED`.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Anything else -> 500.
    #[error("{0}")]
    Internal(String),
}

impl ExtProcError {
    /// HTTP status code.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::BadRequest(_) => 400,
            Self::ServiceUnavailable(_) => 503,
            Self::ResourceExhausted(_) => 429,
            Self::PayloadTooLarge(_) => 413,
            Self::Internal(_) => 500,
        }
    }

    /// Error code name (also the `error_code` metric label).
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "BadRequest",
            Self::ServiceUnavailable(_) => "ServiceUnavailable",
            Self::ResourceExhausted(_) => "ResourceExhausted",
            Self::PayloadTooLarge(_) => "PayloadTooLarge",
            Self::Internal(_) => "Internal",
        }
    }

    /// The gRPC status code for a gRPC request (`INVALID_ARGUMENT`, `UNAVAILABLE`,
    /// `RESOURCE_EXHAUSTED`, `INTERNAL`).
    pub fn grpc_status(&self) -> u32 {
        match self {
            Self::BadRequest(_) => 3,
            Self::ServiceUnavailable(_) => 14,
            Self::ResourceExhausted(_) | Self::PayloadTooLarge(_) => 8,
            Self::Internal(_) => 13,
        }
    }

    /// The response body Envoy returns to the client.
    pub fn body(&self) -> String {
        format!("inference error: {} - {}", self.code(), self)
    }
}

impl From<BodyError> for ExtProcError {
    fn from(e: BodyError) -> Self {
        Self::BadRequest(e.to_string())
    }
}

impl From<ParseError> for ExtProcError {
    fn from(e: ParseError) -> Self {
        Self::BadRequest(e.to_string())
    }
}

impl From<ScheduleError> for ExtProcError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::NoCandidates => Self::ServiceUnavailable(e.to_string()),
            ScheduleError::AllFiltered { .. }
            | ScheduleError::NoResult { .. }
            | ScheduleError::NoProfileRan
            | ScheduleError::Saturated => Self::ResourceExhausted(e.to_string()),
            // GIE and llm-d report an admitter's denial as Internal (500), whatever the reason.
            ScheduleError::NotAdmitted { .. } => Self::Internal(e.to_string()),
        }
    }
}

impl ExtProcError {
    /// The failure for an inbound ext_proc message tonic could not decode: above
    /// `--grpc-max-recv-msg-size` (`OUT_OF_RANGE` from tonic) -> [`Self::PayloadTooLarge`];
    /// not protobuf or a framing error (`INTERNAL`) -> [`Self::BadRequest`]. `None` for
    /// other codes (client cancel, connection reset): nobody is left to answer.
    pub fn from_inbound_status(status: &tonic::Status) -> Option<Self> {
        match status.code() {
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
                Some(Self::PayloadTooLarge(format!("ext_proc message too large: {}", status.message())))
            }
            tonic::Code::Internal => {
                Some(Self::BadRequest(format!("undecodable ext_proc message: {}", status.message())))
            }
            _ => None,
        }
    }

    /// The gRPC status that ends an ext_proc stream failed by this error.
    pub fn stream_status(&self) -> tonic::Status {
        let code = match self {
            Self::PayloadTooLarge(_) | Self::ResourceExhausted(_) => tonic::Code::ResourceExhausted,
            Self::BadRequest(_) => tonic::Code::InvalidArgument,
            Self::ServiceUnavailable(_) => tonic::Code::Unavailable,
            Self::Internal(_) => tonic::Code::Internal,
        };
        tonic::Status::new(code, self.to_string())
    }

    /// The failure for a Flow Control admission outcome; `None` when dispatched.
    pub fn from_admission(outcome: Outcome) -> Option<Self> {
        Some(match outcome {
            Outcome::Dispatched => return None,
            Outcome::RejectedCapacity(why) => {
                Self::ResourceExhausted(format!("request rejected by flow control: {why}"))
            }
            Outcome::RejectedNoEndpoints => {
                Self::ServiceUnavailable("failed to find endpoint candidates for serving the request".into())
            }
            Outcome::EvictedTtl(waited) => Self::ServiceUnavailable(format!(
                "request timed out in queue: waited {}",
                humantime::format_duration(waited)
            )),
            Outcome::EvictedCancelled => Self::ServiceUnavailable("request cancelled while queued".into()),
            Outcome::EvictedOther => Self::Internal("flow control stopped while the request was queued".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_each_failure_to_its_status() {
        assert_eq!(ExtProcError::from(ScheduleError::NoCandidates).http_status(), 503);
        assert_eq!(ExtProcError::from(ScheduleError::Saturated).http_status(), 429);
        let filtered = ScheduleError::AllFiltered { profile: "p".into(), filter: "f".into() };
        assert_eq!(ExtProcError::from(filtered).http_status(), 429);
        let e = ExtProcError::BadRequest("model not found in request body".into());
        assert_eq!(e.body(), "inference error: BadRequest - model not found in request body");
        assert_eq!(ExtProcError::Internal("x".into()).http_status(), 500);
        let denied = ExtProcError::from(ScheduleError::NotAdmitted { reason: "no valid endpoint".into() });
        assert_eq!(denied.http_status(), 500);
        assert_eq!(denied.body(), "inference error: Internal - request cannot be admitted: no valid endpoint");
    }

    #[test]
    fn maps_undecodable_inbound_messages() {
        let big = ExtProcError::from_inbound_status(&tonic::Status::out_of_range("found 9 bytes, the limit is 4"));
        assert_eq!(big.as_ref().map(ExtProcError::http_status), Some(413));
        assert_eq!(big.map(|e| e.stream_status().code()), Some(tonic::Code::ResourceExhausted));
        let junk = ExtProcError::from_inbound_status(&tonic::Status::internal("invalid wire type"));
        assert_eq!(junk.map(|e| e.stream_status().code()), Some(tonic::Code::InvalidArgument));
        assert_eq!(ExtProcError::from_inbound_status(&tonic::Status::cancelled("gone")), None);
    }

    #[test]
    fn maps_flow_control_outcomes() {
        let status = |o| ExtProcError::from_admission(o).map(|e| e.http_status());
        assert_eq!(status(Outcome::Dispatched), None);
        assert_eq!(status(Outcome::RejectedCapacity("full".into())), Some(429));
        assert_eq!(status(Outcome::RejectedNoEndpoints), Some(503));
        assert_eq!(status(Outcome::EvictedCancelled), Some(503));
        assert_eq!(status(Outcome::EvictedOther), Some(500));
        let ttl = ExtProcError::from_admission(Outcome::EvictedTtl(std::time::Duration::from_secs(2)));
        assert_eq!(
            ttl.map(|e| e.body()).unwrap_or_default(),
            "inference error: ServiceUnavailable - request timed out in queue: waited 2s"
        );
    }
}
