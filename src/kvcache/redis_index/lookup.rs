//! The decision-path read: one pipeline of `HKEYS <key>` for every request key (one round
//! trip), then, per endpoint, the longest run of consecutive keys held from the first, tier
//! weighted like the in-memory index ([`EndpointMatch`]). As in llm-d, the first key with no
//! decodable holder ends every run.

use std::collections::HashMap;
use std::sync::Arc;

use super::layout::{PodEntry, request_key};
use crate::kvcache::index::{EndpointMatch, TierWeights};

/// The pipeline: `HKEYS` of each key, in order.
pub fn pipeline(keys: &[u64]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("HKEYS").arg(request_key(*k));
    }
    pipe
}

/// Per endpoint, its run from key 0 and the tier-weighted score; `fields[i]` are the HASH
/// fields of key `i`.
pub fn longest_runs(fields: &[Vec<Vec<u8>>], weights: &TierWeights) -> Vec<EndpointMatch> {
    // Endpoint -> (blocks, weighted); alive while blocks == current index.
    let mut runs: HashMap<String, (usize, f64)> = HashMap::new();
    for (i, key_fields) in fields.iter().enumerate() {
        let mut best: HashMap<String, f64> = HashMap::new();
        for f in key_fields {
            let Some(e) = PodEntry::parse(f) else { continue };
            let w = weights.of(e.scoring_tier());
            let slot = best.entry(e.pod).or_insert(w);
            *slot = slot.max(w);
        }
        if best.is_empty() {
            break;
        }
        let mut alive = 0;
        for (pod, w) in best {
            match runs.get_mut(&pod) {
                Some(run) if run.0 == i => {
                    run.0 += 1;
                    run.1 += w;
                    alive += 1;
                }
                None if i == 0 => {
                    runs.insert(pod, (1, w));
                    alive += 1;
                }
                _ => {}
            }
        }
        if alive == 0 {
            break;
        }
    }
    runs.into_iter()
        .map(|(pod, (blocks, weighted))| EndpointMatch { endpoint: Arc::from(pod), blocks, weighted })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::events::Tier;

    fn f(pod: &str, tier: Tier) -> Vec<u8> {
        PodEntry::confirmed(pod, tier, None).field().into_bytes()
    }

    fn sorted(mut m: Vec<EndpointMatch>) -> Vec<(String, usize, f64)> {
        m.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
        m.into_iter().map(|m| (m.endpoint.to_string(), m.blocks, m.weighted)).collect()
    }

    #[test]
    fn runs_are_contiguous_from_block_zero_and_tier_weighted() {
        let w = TierWeights::default();
        let fields = vec![
            vec![f("a", Tier::Gpu), f("b", Tier::Cpu), f("b", Tier::Gpu)],
            vec![f("a", Tier::Cpu), b"garbage".to_vec()],
            vec![f("a", Tier::Gpu), f("b", Tier::Gpu)],
            vec![],
            vec![f("a", Tier::Gpu)],
        ];
        assert_eq!(sorted(longest_runs(&fields, &w)), [("a".into(), 3, 2.8), ("b".into(), 1, 1.0)]);
        let late = vec![vec![f("a", Tier::Gpu)], vec![f("c", Tier::Gpu)]];
        assert_eq!(sorted(longest_runs(&late, &w)), [("a".into(), 1, 1.0)], "c joined after block 0");
        assert!(longest_runs(&[vec![b"{}x".to_vec()]], &w).is_empty());
        assert_eq!(pipeline(&[1, 2]).cmd_iter().count(), 2);
    }
}
