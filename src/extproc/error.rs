//! The single mapping from request-processing failures to the wire: an `ImmediateResponse`
//! with HTTP status and body `inference error: <Code> - <Msg>` (GIE's format and codes).

use crate::flowcontrol::Outcome;
use crate::framework::ScheduleError;
use crate::request::openai::BodyError;
use crate::request::parsers::ParseError;

/// What the client is told about a failure: one HTTP status, error code and gRPC code each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 400, `INVALID_ARGUMENT`.
    BadRequest,
    /// 503, `UNAVAILABLE`.
    ServiceUnavailable,
    /// 429, `RESOURCE_EXHAUSTED`.
    ResourceExhausted,
    /// 413, `RESOURCE_EXHAUSTED`.
    PayloadTooLarge,
    /// 500, `INTERNAL`.
    Internal,
}

impl Status {
    /// HTTP status, error code name (also the `error_code` metric label) and gRPC code: the
    /// one table.
    fn wire(self) -> (u16, &'static str, tonic::Code) {
        match self {
            Self::BadRequest => (400, "BadRequest", tonic::Code::InvalidArgument),
            Self::ServiceUnavailable => (503, "ServiceUnavailable", tonic::Code::Unavailable),
            Self::ResourceExhausted => (429, "ResourceExhausted", tonic::Code::ResourceExhausted),
            Self::PayloadTooLarge => (413, "PayloadTooLarge", tonic::Code::ResourceExhausted),
            Self::Internal => (500, "Internal", tonic::Code::Internal),
        }
    }
}

/// A request-processing failure that ends the request with an immediate response. Failures
/// of other modules are kept whole (their `source()` chain included); [`Self::status`]
/// chooses what the client is told.
#[derive(Debug, thiserror::Error)]
pub enum ExtProcError {
    /// The OpenAI-style body was rejected -> 400.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The parser that claimed the path rejected the body -> 400.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The scheduler found no endpoint: 503 (no candidate), 429 (all filtered, saturated) or
    /// 500 (an admitter denied).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A blocking-pool task (parse or schedule of a large body) failed -> 500.
    #[error("{what} task failed: {source}")]
    Task {
        /// Which task.
        what: &'static str,
        /// The join error.
        #[source]
        source: tokio::task::JoinError,
    },
    /// Malformed request outside the body parsers (size, model name, undecodable
    /// message) -> 400.
    #[error("{0}")]
    BadRequest(String),
    /// No endpoint to serve the request (e.g. Flow Control found none) -> 503.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// Rejected for capacity (Flow Control) -> 429.
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
    /// What the client is told.
    pub fn status(&self) -> Status {
        match self {
            Self::Body(_) | Self::Parse(_) | Self::BadRequest(_) => Status::BadRequest,
            Self::Schedule(ScheduleError::NoCandidates) | Self::ServiceUnavailable(_) => Status::ServiceUnavailable,
            Self::Schedule(
                ScheduleError::AllFiltered { .. }
                | ScheduleError::NoResult { .. }
                | ScheduleError::NoProfileRan
                | ScheduleError::Saturated,
            )
            | Self::ResourceExhausted(_) => Status::ResourceExhausted,
            Self::PayloadTooLarge(_) => Status::PayloadTooLarge,
            // GIE and llm-d report an admitter's denial as Internal (500), whatever the reason.
            Self::Schedule(ScheduleError::NotAdmitted { .. }) | Self::Task { .. } | Self::Internal(_) => {
                Status::Internal
            }
        }
    }

    /// HTTP status code.
    pub fn http_status(&self) -> u16 {
        self.status().wire().0
    }

    /// Error code name (also the `error_code` metric label).
    pub fn code(&self) -> &'static str {
        self.status().wire().1
    }

    /// The gRPC status code for a gRPC request (`INVALID_ARGUMENT`, `UNAVAILABLE`,
    /// `RESOURCE_EXHAUSTED`, `INTERNAL`), as its number.
    pub fn grpc_status(&self) -> u32 {
        self.status().wire().2 as u32
    }

    /// The response body Envoy returns to the client.
    pub fn body(&self) -> String {
        format!("inference error: {} - {}", self.code(), self)
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
        tonic::Status::new(self.status().wire().2, self.to_string())
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
    fn keeps_the_source_of_a_body_error() {
        let json = serde_json::from_slice::<serde_json::Value>(b"{").expect_err("not JSON");
        let e = ExtProcError::from(BodyError::Json(json));
        assert_eq!(e.http_status(), 400);
        assert!(e.to_string().starts_with("invalid request body: "));
        let source = std::error::Error::source(&e).expect("the body error's source is kept");
        assert!(source.is::<serde_json::Error>());
    }

    #[test]
    fn maps_undecodable_inbound_messages() {
        let big = ExtProcError::from_inbound_status(&tonic::Status::out_of_range("found 9 bytes, the limit is 4"));
        assert_eq!(big.as_ref().map(ExtProcError::http_status), Some(413));
        assert_eq!(big.map(|e| e.stream_status().code()), Some(tonic::Code::ResourceExhausted));
        let junk = ExtProcError::from_inbound_status(&tonic::Status::internal("invalid wire type"));
        assert_eq!(junk.map(|e| e.stream_status().code()), Some(tonic::Code::InvalidArgument));
        assert!(ExtProcError::from_inbound_status(&tonic::Status::cancelled("gone")).is_none());
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
