//! `KvStatus`: the KV-event state readiness reports, kept as a value rather than read back
//! from Prometheus. The drift detector of every subscriber records mismatches here (next to
//! `epp_kv_drift_mismatches_total`); the app hands the same shared value to `/readyz`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Shared KV-event status; clones share one state.
#[derive(Clone, Debug, Default)]
pub struct KvStatus {
    /// Mismatched block hashes per (cause, endpoint), the order `/readyz` lists them in.
    drift: Arc<Mutex<BTreeMap<(&'static str, String), u64>>>,
}

impl KvStatus {
    /// Counts one block hash from `endpoint` that did not match the configured hashing.
    pub fn record_drift(&self, endpoint: &str, cause: &'static str) {
        *self.lock().entry((cause, endpoint.to_owned())).or_default() += 1;
    }

    /// Forgets `endpoint` (it left the pool).
    pub fn forget_endpoint(&self, endpoint: &str) {
        self.lock().retain(|(_, e), _| e != endpoint);
    }

    /// `/readyz` detail lines, one per endpoint and cause with a mismatch.
    pub fn drift_details(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|((cause, endpoint), n)| {
                format!(
                    "kv-events drift: endpoint {endpoint} published {n} block hashes that do not match the configured vLLM hashing (likely cause: {cause})"
                )
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<(&'static str, String), u64>> {
        // A panicking holder leaves a valid map (each update is one insert or retain).
        self.drift.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_lines_follow_records_and_departures() {
        let status = KvStatus::default();
        let shared = status.clone();
        assert!(shared.drift_details().is_empty());
        status.record_drift("b", "hash_seed");
        status.record_drift("a", "hash_seed");
        status.record_drift("a", "hash_seed");
        status.record_drift("a", "block_size");
        let lines = shared.drift_details();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("endpoint a published 1 ") && lines[0].ends_with("(likely cause: block_size)"));
        assert!(lines[1].contains("endpoint a published 2 ") && lines[1].ends_with("(likely cause: hash_seed)"));
        assert!(lines[2].contains("endpoint b published 1 "));
        status.forget_endpoint("a");
        assert_eq!(shared.drift_details().len(), 1);
    }
}
