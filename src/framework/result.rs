//! Scheduling outputs: per-profile results, the combined `SchedulingResult` (primary profile
//! plus the others, e.g. prefill), and the request-header edits pre-request hooks make.

use std::sync::Arc;

use crate::endpoints::model::Candidate;

/// Results of the profiles run so far, in run order. `None` = the profile ran and failed
/// (or was skipped on purpose).
#[derive(Clone, Debug, Default)]
pub struct ProfileResults {
    /// (profile name, result).
    pub entries: Vec<(Arc<str>, Option<ProfileResult>)>,
}

impl ProfileResults {
    /// True when the profile was evaluated (successfully or not).
    pub fn was_evaluated(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| &**n == name)
    }

    /// The successful result of a profile.
    pub fn get(&self, name: &str) -> Option<&ProfileResult> {
        self.entries.iter().find(|(n, _)| &**n == name).and_then(|(_, r)| r.as_ref())
    }

    /// Records a profile outcome.
    pub fn insert(&mut self, name: Arc<str>, result: Option<ProfileResult>) {
        self.entries.retain(|(n, _)| *n != name);
        self.entries.push((name, result));
    }
}

/// What one profile chose.
#[derive(Clone, Debug)]
pub struct ProfileResult {
    /// Chosen endpoints; the first is the primary target.
    pub targets: Vec<Candidate>,
}

/// Profile name whose endpoint runs the prefill of a P/D split.
pub const PREFILL_PROFILE: &str = "prefill";

/// The decision for a request.
#[derive(Clone, Debug)]
pub struct SchedulingResult {
    /// Name of the profile whose targets become the destination.
    pub primary_profile: Arc<str>,
    /// Every successful profile result (including the primary).
    pub profiles: Vec<(Arc<str>, ProfileResult)>,
    /// When set, the destination uses this port instead of each target's own port (the
    /// deprecated data-parallel handler sends every rank's traffic to the sidecar port and
    /// names the rank in `x-data-parallel-host-port`).
    pub destination_port: Option<u16>,
}

impl SchedulingResult {
    /// The primary profile's result.
    pub fn primary(&self) -> Option<&ProfileResult> {
        self.profile(&self.primary_profile)
    }

    /// A profile's result by name.
    pub fn profile(&self, name: &str) -> Option<&ProfileResult> {
        self.profiles.iter().find(|(n, _)| &**n == name).map(|(_, r)| r)
    }

    /// The endpoints that will hold the prompt's KV blocks once it runs: the primary
    /// profile's first target, then the `prefill` profile's first target when it differs.
    pub fn cache_holders(&self) -> impl Iterator<Item = &Candidate> {
        let primary = self.primary().and_then(|r| r.targets.first());
        let prefill = self
            .profile(PREFILL_PROFILE)
            .and_then(|r| r.targets.first())
            .filter(|p| primary.is_none_or(|c| c.endpoint.id != p.endpoint.id));
        primary.into_iter().chain(prefill)
    }

    /// A result whose destination is the primary profile's targets.
    pub fn new(primary_profile: Arc<str>, profiles: Vec<(Arc<str>, ProfileResult)>) -> Self {
        Self { primary_profile, profiles, destination_port: None }
    }

    /// The destination value: the primary targets' `ip:port` joined with `,` (the port
    /// replaced by `destination_port` when set).
    pub fn destination(&self) -> String {
        let Some(r) = self.primary() else { return String::new() };
        let each = |c: &Candidate| match self.destination_port {
            Some(port) => crate::endpoints::model::host_port(c.endpoint.address, port),
            None => c.endpoint.host_port.to_string(),
        };
        r.targets.iter().map(each).collect::<Vec<_>>().join(",")
    }
}

/// Request-header changes requested by pre-request hooks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// Headers to set (lower-case name, value).
    pub set: Vec<(String, String)>,
    /// Headers to remove.
    pub remove: Vec<String>,
}

impl HeaderEdits {
    /// Sets a header, replacing an earlier edit of the same name.
    pub fn set(&mut self, name: &str, value: String) {
        self.set.retain(|(n, _)| n != name);
        self.remove.retain(|n| n != name);
        self.set.push((name.to_string(), value));
    }

    /// Removes a header (and any earlier set of it).
    pub fn remove(&mut self, name: &str) {
        self.set.retain(|(n, _)| n != name);
        if !self.remove.iter().any(|n| n == name) {
            self.remove.push(name.to_string());
        }
    }
}

/// Dynamic metadata response hooks add to the final response message sent to Envoy:
/// namespace -> key -> number (what `request-attribute-reporter` writes). Ordered maps keep
/// the wire output deterministic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataEdits {
    /// namespace -> (key -> value).
    pub namespaces: std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
}

impl MetadataEdits {
    /// Sets `namespace.key` to a number, replacing an earlier value.
    pub fn set_number(&mut self, namespace: &str, key: &str, value: f64) {
        self.namespaces.entry(namespace.to_string()).or_default().insert(key.to_string(), value);
    }

    /// True when nothing was set.
    pub fn is_empty(&self) -> bool {
        self.namespaces.values().all(|m| m.is_empty())
    }
}

/// Why a request could not be scheduled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// No endpoint was a candidate (empty pool, or the subset hint matched nothing).
    #[error("failed to find endpoint candidates for serving the request")]
    NoCandidates,
    /// Every candidate was filtered out in a profile.
    #[error("failed to find target endpoint: profile {profile}: filter {filter} left no endpoint")]
    AllFiltered {
        /// Profile name.
        profile: String,
        /// The filter that emptied the set.
        filter: String,
    },
    /// The handler found no usable profile result.
    #[error("failed to find target endpoint: {reason}")]
    NoResult {
        /// Why.
        reason: String,
    },
    /// The handler picked no profile at all.
    #[error("failed to find target endpoint: no scheduling profile was run")]
    NoProfileRan,
    /// A sheddable request arrived while the pool is saturated.
    #[error("system saturated, sheddable request dropped")]
    Saturated,
    /// An admitter denied the request (GIE/llm-d: `Internal`, HTTP 500).
    #[error("request cannot be admitted: {reason}")]
    NotAdmitted {
        /// The admitter's reason.
        reason: String,
    },
}
