//! Leader election on a `coordination.k8s.io/v1` Lease, as controller-runtime (and so GIE)
//! does it: the Lease `epp-<namespace>-<pool>.gateway-api-inference-extension.sigs.k8s.io` in
//! the pool namespace, holder = the pod name, lease duration 15 s, renew deadline 10 s, retry
//! period 2 s (controller-runtime's defaults, which GIE keeps).
//!
//! Every retry period a candidate reads the Lease: absent -> create it; held by itself ->
//! renew; held by another whose record has not changed for a lease duration (timed on the
//! local clock from when this candidate last saw it change, like client-go, so clock skew
//! does not matter) or released (empty holder) -> take it over. Writes carry the
//! `resourceVersion` read, so two candidates racing get one 409 Conflict and one winner.
//! A leader that cannot renew for the renew deadline steps down (readiness NOT_SERVING)
//! before anyone else may take over (lease duration > renew deadline). On stop the leader
//! releases the Lease (empty holder) so a standby takes over within one retry period.
//!
//! The result is published on a `watch` channel (`true` = leading); what leading means is
//! the caller's business (epp: readiness, see `crate::health`).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::error::K8sError;
use super::metrics::K8sMetrics;
use super::watch::client_failure_reason;

/// The Lease name GIE uses for a pool.
pub fn lease_name(namespace: &str, pool: &str) -> String {
    format!("epp-{namespace}-{pool}.gateway-api-inference-extension.sigs.k8s.io")
}

/// Timing of the election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTiming {
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// A leader steps down when it could not renew for this long.
    pub renew_deadline: Duration,
    /// Period of acquire and renew attempts.
    pub retry_period: Duration,
}

impl Default for ElectionTiming {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate.
pub struct LeaderElection {
    /// Leases of the pool namespace.
    pub api: Api<Lease>,
    /// Lease name ([`lease_name`]).
    pub name: String,
    /// This candidate's identity (the pod name).
    pub holder: String,
    /// Timing.
    pub timing: ElectionTiming,
    /// Metric handles (`epp_k8s_leader`, failures with `resource="leases"`).
    pub metrics: K8sMetrics,
}

/// The Lease record as last seen and when it was first seen that way.
struct Observed {
    record: (String, Option<MicroTime>),
    since: Instant,
}

/// What one attempt found.
enum Attempt {
    /// This candidate holds the Lease (created, renewed or taken over).
    Leading,
    /// Someone else holds it, or another candidate won a race.
    Following,
}

impl LeaderElection {
    /// Campaigns until `stop` fires, publishing leadership on `leading`; then releases the
    /// Lease if held.
    pub async fn run(self, leading: watch::Sender<bool>, stop: CancellationToken) {
        let mut observed: Option<Observed> = None;
        let mut last_renewal: Option<Instant> = None;
        let mut failing = false;
        loop {
            let attempt = tokio::select! {
                _ = stop.cancelled() => break,
                a = self.try_acquire_or_renew(&mut observed) => a,
            };
            let is_leader = *leading.borrow();
            match attempt {
                Ok(Attempt::Leading) => {
                    last_renewal = Some(Instant::now());
                    failing = false;
                    if !is_leader {
                        info!(lease = %self.name, holder = %self.holder, "This instance is now the leader!");
                        self.publish(&leading, true);
                    }
                }
                Ok(Attempt::Following) => {
                    failing = false;
                    if is_leader {
                        warn!(lease = %self.name, "Lease taken by another replica: stepping down");
                        self.publish(&leading, false);
                    }
                }
                Err(error) => {
                    let reason = match &error {
                        K8sError::Api(e) => client_failure_reason(e),
                        _ => "status",
                    };
                    self.metrics.failures.with_label_values(&["leases", reason]).inc();
                    if !failing {
                        warn!(lease = %self.name, %error, "Lease acquire/renew failed; retrying");
                        failing = true;
                    }
                    let expired = last_renewal.is_none_or(|t| t.elapsed() >= self.timing.renew_deadline);
                    if is_leader && expired {
                        warn!(lease = %self.name, deadline = ?self.timing.renew_deadline,
                            "Lease not renewed within the renew deadline: stepping down");
                        self.publish(&leading, false);
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        if *leading.borrow() {
            self.publish(&leading, false);
            match tokio::time::timeout(self.timing.retry_period, self.release()).await {
                Ok(Ok(())) => info!(lease = %self.name, "Lease released"),
                Ok(Err(error)) => warn!(lease = %self.name, %error, "Lease release failed; it expires on its own"),
                Err(_) => warn!(lease = %self.name, "Lease release timed out; it expires on its own"),
            }
        }
    }

    fn publish(&self, leading: &watch::Sender<bool>, value: bool) {
        self.metrics.leader.set(i64::from(value));
        leading.send_replace(value);
    }

    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<Attempt, K8sError> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(K8sError::Api)? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(now.clone(), Some(now), 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following),
                Err(e) => Err(K8sError::Api(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = (holder.clone(), spec.renew_time.clone());
        if observed.as_ref().is_none_or(|o| o.record != record) {
            *observed = Some(Observed { record, since: Instant::now() });
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        let unchanged_for = observed.as_ref().map_or(Duration::ZERO, |o| o.since.elapsed());
        if !holder.is_empty() && holder != self.holder && unchanged_for < duration {
            return Ok(Attempt::Following);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if holder == self.holder {
            self.spec(now, spec.acquire_time, transitions)
        } else {
            self.spec(now.clone(), Some(now), transitions.saturating_add(1))
        });
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following),
            Err(e) => Err(K8sError::Api(e)),
        }
    }

    fn spec(&self, renew: MicroTime, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: i32::try_from(self.timing.lease_duration.as_secs()).ok(),
            acquire_time: acquire,
            renew_time: Some(renew),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Empties the holder (client-go's release: holder "", duration 1 s) if still ours.
    async fn release(&self) -> Result<(), K8sError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(K8sError::Api)? else { return Ok(()) };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.holder.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        lease.spec = Some(spec);
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map_err(K8sError::Api)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_named_as_gie_names_it() {
        assert_eq!(lease_name("llm", "pool"), "epp-llm-pool.gateway-api-inference-extension.sigs.k8s.io");
        let t = ElectionTiming::default();
        assert!(t.renew_deadline < t.lease_duration, "a leader steps down before others may take over");
    }
}
