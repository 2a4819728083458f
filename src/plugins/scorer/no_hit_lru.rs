//! `no-hit-lru-scorer`: spreads cold requests (no candidate holds any of the prompt's prefix)
//! over endpoints that have not recently received one, so new prefixes do not pile onto one
//! endpoint. Any prefix hit among the candidates -> 0.5 for all (leave it to the prefix
//! scorer). Cold: never-used endpoints first, then least recently used; score
//! `1 - rank / (n - 1)` (1.0 for a single candidate). Pre-request: for cold requests the
//! primary target (and the target of a profile named `prefill`) move to the front of the LRU.
//!
//! Parameters: `prefixMatchInfoProducerName` ("" = default prefix producer), `lruSize` (1024,
//! > 0), `prefixPluginType` / `prefixPluginName` (accepted for old configs; ignored).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::endpoints::model::{Candidate, EndpointId};
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::{DataKey, SchedulingContext};
use crate::framework::plugin::{Consumer, PluginInstance, PluginName, PreRequest, Scorer};
use crate::framework::result::{HeaderEdits, SchedulingResult};

/// Type name.
pub const TYPE: &str = "no-hit-lru-scorer";

/// Parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Params {
    /// Ignored (pre-producer configs).
    pub prefix_plugin_type: Option<String>,
    /// Ignored (pre-producer configs).
    pub prefix_plugin_name: Option<String>,
    /// Prefix producer to read.
    pub prefix_match_info_producer_name: String,
    /// Endpoints remembered.
    pub lru_size: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            prefix_plugin_type: None,
            prefix_plugin_name: None,
            prefix_match_info_producer_name: String::new(),
            lru_size: 1024,
        }
    }
}

/// The scorer and its LRU (front = most recently used).
#[derive(Debug)]
pub struct NoHitLruScorer {
    producer: Option<PluginName>,
    size: usize,
    lru: Mutex<VecDeque<EndpointId>>,
}

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let p: Params = decode_params(spec)?;
    if p.lru_size == 0 {
        return Err(BuildError::new(format!("{}.parameters.lruSize", spec.path), "must be > 0"));
    }
    let s = Arc::new(NoHitLruScorer::new(super::producer_name(p.prefix_match_info_producer_name), p.lru_size));
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_scorer(s.clone()).with_consumer(s.clone()).with_pre_request(s))
}

impl NoHitLruScorer {
    /// An empty LRU of `size` endpoints.
    pub fn new(producer: Option<PluginName>, size: usize) -> Self {
        Self { producer, size, lru: Mutex::new(VecDeque::new()) }
    }

    fn is_cold(&self, cx: &SchedulingContext<'_>) -> bool {
        cx.data
            .prefix
            .get(self.producer.as_deref())
            .is_none_or(|m| m.per_endpoint.values().all(|i| i.match_blocks == 0))
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, VecDeque<EndpointId>> {
        // The list is valid after any panic (each operation leaves it well-formed).
        self.lru.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn touch(&self, id: &EndpointId) {
        let mut lru = self.lru();
        lru.retain(|e| e != id);
        lru.push_front(id.clone());
        lru.truncate(self.size);
    }
}

impl Consumer for NoHitLruScorer {
    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::PrefixCacheMatchInfo(self.producer.clone())]
    }
}

impl Scorer for NoHitLruScorer {
    fn score(&self, cx: &SchedulingContext<'_>, candidates: &[Candidate]) -> Vec<f64> {
        if !self.is_cold(cx) {
            return vec![0.5; candidates.len()];
        }
        let lru = self.lru();
        // Never used sorts first (as if older than anything), then older before newer.
        let age = |c: &Candidate| lru.iter().position(|e| e == c.id()).map_or(usize::MAX, |p| p);
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(age(&candidates[i])));
        let n = candidates.len();
        let mut scores = vec![1.0; n];
        if n > 1 {
            for (rank, &i) in order.iter().enumerate() {
                scores[i] = 1.0 - rank as f64 / (n - 1) as f64;
            }
        }
        scores
    }
}

impl PreRequest for NoHitLruScorer {
    fn pre_request(&self, cx: &SchedulingContext<'_>, result: &SchedulingResult, _: &mut HeaderEdits) {
        if !self.is_cold(cx) {
            return;
        }
        for profile in [Some(&*result.primary_profile), Some("prefill")].into_iter().flatten() {
            if let Some(t) = result.profile(profile).and_then(|r| r.targets.first()) {
                self.touch(t.id());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::data::ByProducer;
    use crate::framework::data::{MatchInfo, PrefixMatches, RequestData};
    use crate::framework::result::ProfileResult;
    use crate::test_util::{context_for, endpoint};

    #[test]
    fn cold_requests_rotate_through_endpoints() {
        let s = NoHitLruScorer::new(None, 8);
        let request = Default::default();
        let data = RequestData::default();
        let cx = context_for(&request, &data);
        let c = [endpoint("a").build(), endpoint("b").build(), endpoint("c").build()];
        assert_eq!(s.score(&cx, &c), vec![1.0, 0.5, 0.0], "never used: input order");
        let pick = |id: &str| {
            SchedulingResult::new("d".into(), vec![("d".into(), ProfileResult { targets: vec![endpoint(id).build()] })])
        };
        s.pre_request(&cx, &pick("a"), &mut HeaderEdits::default());
        s.pre_request(&cx, &pick("b"), &mut HeaderEdits::default());
        assert_eq!(s.score(&cx, &c), vec![0.5, 0.0, 1.0], "c never used, then a (older), then b");
        super::super::contract::check(&s, &data);
    }

    #[test]
    fn any_hit_scores_one_half() {
        let mut m = PrefixMatches { block_size_tokens: 16, total_blocks: 2, ..Default::default() };
        m.per_endpoint.insert("a".into(), MatchInfo { match_blocks: 1, weighted_blocks: 1.0 });
        let data = RequestData { prefix: ByProducer::only("p", Arc::new(m)), ..Default::default() };
        let request = Default::default();
        let s = NoHitLruScorer::new(None, 8);
        assert_eq!(
            s.score(&context_for(&request, &data), &[endpoint("a").build(), endpoint("b").build()]),
            vec![0.5, 0.5]
        );
    }
}
