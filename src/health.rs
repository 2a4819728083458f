//! gRPC health (`grpc.health.v1`) as the Go EPPs answer it, on the health port (and on the
//! ext_proc port with `--health-checking`).
//!
//! Names: `liveness` is SERVING while the process works. The readiness names (`""`,
//! `inference-extension`, `readiness`, `envoy.service.ext_proc.v3.ExternalProcessor`) are
//! SERVING once the endpoint source has synced once (pool and its pods listed, endpoints file
//! loaded) and until shutdown begins (SIGTERM), NOT_SERVING otherwise. Any other name answers
//! NOT_FOUND (the gRPC health protocol's answer). `List` returns every name; `Watch` is
//! UNIMPLEMENTED, as in GIE.
//!
//! With leader election (`--ha-enable-leader-election`), as GIE: `liveness` stays SERVING;
//! `readiness`, `""` and the ext_proc name are SERVING only while this replica leads (and is
//! synced and not draining); other names (`inference-extension` included) are unknown.
//!
//! Our own service rather than tonic-health's reporter: tonic-health 0.14 has no `List`, and
//! the statuses here are computed from two flags at call time, so nothing can drift.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tonic::{Request, Response, Status};

use crate::proto::grpc::health::v1::health_check_response::ServingStatus;
use crate::proto::grpc::health::v1::health_server::{Health, HealthServer};
use crate::proto::grpc::health::v1::{HealthCheckRequest, HealthCheckResponse, HealthListRequest, HealthListResponse};

/// gRPC service name of ext_proc (also a health service name).
pub const EXT_PROC_SERVICE: &str = "envoy.service.ext_proc.v3.ExternalProcessor";

/// The liveness name.
pub const LIVENESS: &str = "liveness";

/// Names that report readiness.
pub const READINESS_NAMES: [&str; 4] = ["", "inference-extension", "readiness", EXT_PROC_SERVICE];

/// Readiness names with leader election on.
pub const ELECTION_READINESS_NAMES: [&str; 3] = ["", "readiness", EXT_PROC_SERVICE];

/// Readiness inputs shared by the health servers, discovery and shutdown.
#[derive(Clone, Debug, Default)]
pub struct HealthState {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    synced: AtomicBool,
    draining: AtomicBool,
    election: AtomicBool,
    leader: AtomicBool,
}

impl HealthState {
    /// A state that is neither synced nor draining.
    pub fn new() -> Self {
        Self::default()
    }

    /// The endpoint source has synced (once is enough).
    pub fn mark_synced(&self) {
        self.inner.synced.store(true, Ordering::Release);
    }

    /// Shutdown began: readiness turns NOT_SERVING for good.
    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Release);
    }

    /// Leader election is on: readiness also needs leadership ([`Self::set_leader`]).
    pub fn enable_leader_election(&self) {
        self.inner.election.store(true, Ordering::Release);
    }

    /// This replica leads (or no longer does).
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.store(leader, Ordering::Release);
    }

    fn election(&self) -> bool {
        self.inner.election.load(Ordering::Acquire)
    }

    /// Synced, not draining and, with leader election, leading.
    pub fn is_ready(&self) -> bool {
        self.inner.synced.load(Ordering::Acquire)
            && !self.inner.draining.load(Ordering::Acquire)
            && (!self.election() || self.inner.leader.load(Ordering::Acquire))
    }

    /// The readiness names answered in the current mode.
    pub fn readiness_names(&self) -> &'static [&'static str] {
        if self.election() { &ELECTION_READINESS_NAMES } else { &READINESS_NAMES }
    }

    /// The status of `service`.
    pub fn status(&self, service: &str) -> ServingStatus {
        if service == LIVENESS {
            ServingStatus::Serving
        } else if self.readiness_names().contains(&service) {
            if self.is_ready() { ServingStatus::Serving } else { ServingStatus::NotServing }
        } else {
            ServingStatus::ServiceUnknown
        }
    }

    /// The gRPC service answering from this state.
    pub fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService { state: self.clone() })
    }
}

/// The `grpc.health.v1.Health` implementation.
#[derive(Clone, Debug)]
pub struct HealthService {
    state: HealthState,
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse { status: status as i32 }
}

type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        match self.state.status(&request.get_ref().service) {
            ServingStatus::ServiceUnknown => Err(Status::not_found("unknown service")),
            status => Ok(Response::new(response(status))),
        }
    }

    async fn list(&self, _request: Request<HealthListRequest>) -> Result<Response<HealthListResponse>, Status> {
        let statuses = std::iter::once(LIVENESS)
            .chain(self.state.readiness_names().iter().copied())
            .map(|name| (name.to_string(), response(self.state.status(name))))
            .collect();
        Ok(Response::new(HealthListResponse { statuses }))
    }

    type WatchStream = WatchStream;

    async fn watch(&self, _request: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("Watch is not implemented"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_sync_and_drain_liveness_stays() {
        let state = HealthState::new();
        assert_eq!(state.status(LIVENESS), ServingStatus::Serving);
        for name in READINESS_NAMES {
            assert_eq!(state.status(name), ServingStatus::NotServing, "{name:?} before sync");
        }
        state.mark_synced();
        for name in READINESS_NAMES {
            assert_eq!(state.status(name), ServingStatus::Serving, "{name:?} after sync");
        }
        state.start_draining();
        state.mark_synced();
        for name in READINESS_NAMES {
            assert_eq!(state.status(name), ServingStatus::NotServing, "{name:?} while draining");
        }
        assert_eq!(state.status(LIVENESS), ServingStatus::Serving);
        assert_eq!(state.status("other"), ServingStatus::ServiceUnknown);
    }

    #[test]
    fn with_leader_election_only_the_leader_is_ready() {
        let state = HealthState::new();
        state.enable_leader_election();
        state.mark_synced();
        for name in ELECTION_READINESS_NAMES {
            assert_eq!(state.status(name), ServingStatus::NotServing, "{name:?} before leading");
        }
        assert_eq!(state.status("inference-extension"), ServingStatus::ServiceUnknown);
        state.set_leader(true);
        for name in ELECTION_READINESS_NAMES {
            assert_eq!(state.status(name), ServingStatus::Serving, "{name:?} while leading");
        }
        state.set_leader(false);
        assert_eq!(state.status("readiness"), ServingStatus::NotServing);
        assert_eq!(state.status(LIVENESS), ServingStatus::Serving);
    }
}
