//! Index tests: worked examples, vectors, and a naive model under random ops.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::kvcache::decode::decode_batch;
use crate::kvcache::keys::{RequestKeyer, request_keys};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn request_index(block_size: usize) -> PrefixIndex {
    PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size },
        ..IndexConfig::default()
    })
}

fn engine_index() -> PrefixIndex {
    PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Engine { hasher: None, block_size: 16 },
        capacity: 1 << 20,
        shards: 8,
        ..IndexConfig::default()
    })
}

#[test]
fn llmd_worked_example_store_then_bytes_removal() {
    let idx = request_index(4);
    let stored = decode_batch(&unhex(
        "93cb41d954fc402000009199ab426c6f636b53746f726564921112c098010203040506070804c0a3475055c0c000",
    ))
    .expect("vector");
    let st = idx.apply("10.0.0.5:8000", "Qwen/Qwen3-0.6B", &stored);
    assert_eq!(st.count(EventKind::Stored, EventOutcome::Applied), 1);
    let keys = [12477849404512668933, 14303407131179071413];
    assert_eq!(request_keys("Qwen/Qwen3-0.6B", None, &(1..=8).collect::<Vec<_>>(), 4), keys);
    let m = idx.lookup(&keys);
    assert_eq!(m.len(), 1);
    assert_eq!((&*m[0].endpoint, m[0].blocks, m[0].weighted), ("10.0.0.5:8000", 2, 2.0));
    let mut p = unhex("92cb41d954fc402000009193ac426c6f636b52656d6f76656491c420");
    p.extend([0u8; 31]);
    p.extend(unhex("11a3475055"));
    idx.apply("10.0.0.5:8000", "Qwen/Qwen3-0.6B", &decode_batch(&p).expect("removal"));
    assert!(idx.lookup(&keys).is_empty(), "first block gone -> no prefix");
    assert_eq!(idx.lookup(&keys[1..])[0].blocks, 1);
}

fn fixture(name: &str) -> EventBatch {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kv_events/events").join(name);
    decode_batch(&std::fs::read(p).expect("fixture")).expect("decodes")
}

fn tokens_of(b: &EventBatch) -> Vec<u32> {
    b.events
        .iter()
        .filter_map(|e| if let KvEvent::BlockStored(s) = e { Some(s.token_ids.clone()) } else { None })
        .flatten()
        .collect()
}

#[test]
fn vllm_prefill_then_decode_chain_and_lora_root() {
    let idx = request_index(16);
    let (a, b) = (fixture("01_stored_prefill_u64.bin"), fixture("02_stored_decode_parent_u64.bin"));
    idx.apply("pod-a", "m", &a);
    assert_eq!(idx.apply("pod-a", "m", &b).count(EventKind::Stored, EventOutcome::Applied), 1);
    let mut toks = tokens_of(&a);
    toks.extend(tokens_of(&b));
    let m = idx.lookup(&request_keys("m", None, &toks, 16));
    assert_eq!(m[0].blocks, 4);
    // Joining mid-stream: the decode event's parent is unknown.
    let fresh = request_index(16);
    assert_eq!(fresh.apply("pod-a", "m", &b).count(EventKind::Stored, EventOutcome::UnknownParent), 1);
    // LoRA events are rooted at the adapter name, not the topic model.
    let lora = fixture("03_stored_lora_u64.bin");
    idx.apply("pod-b", "base", &lora);
    assert_eq!(idx.lookup(&request_keys("sql-lora", None, &tokens_of(&lora), 16))[0].blocks, 2);
    assert!(idx.lookup(&request_keys("base", None, &tokens_of(&lora), 16)).is_empty());
}

#[test]
fn engine_and_request_block_sizes_may_differ() {
    let a = fixture("01_stored_prefill_u64.bin"); // 3 engine blocks of 16
    let idx = request_index(8);
    idx.apply("pod-a", "m", &a);
    let keys = request_keys("m", None, &tokens_of(&a), 8);
    assert_eq!(keys.len(), 6);
    assert_eq!(idx.lookup(&keys)[0].blocks, 6);
    // Removing engine block 2 releases request keys 4 and 5 only.
    let rm = EventBatch {
        events: vec![KvEvent::BlockRemoved(BlockRemovedEv {
            block_hashes: vec![12222157334376113544],
            medium: None,
            group_idx: None,
        })],
        ..EventBatch::default()
    };
    idx.apply("pod-a", "m", &rm);
    assert_eq!(idx.lookup(&keys)[0].blocks, 4);
    assert_eq!(idx.entries(), 4);
}

use crate::kvcache::events::{BlockRemoved as BlockRemovedEv, EventBatch, EventKind, KvEvent};

#[test]
fn tier_weights_and_all_blocks_cleared() {
    let idx = engine_index();
    idx.store_keys("a", Tier::Gpu, &[1, 2, 3], AddMode::Set);
    idx.store_keys("b", Tier::Cpu, &[1, 2], AddMode::Set);
    idx.store_keys("b", Tier::Gpu, &[1], AddMode::Set);
    let m: BTreeMap<_, _> =
        idx.lookup(&[1, 2, 3, 4]).into_iter().map(|m| (m.endpoint.to_string(), (m.blocks, m.weighted))).collect();
    assert_eq!(m["a"], (3, 3.0));
    assert_eq!(m["b"], (2, 1.8));
    idx.apply("a", "", &EventBatch { events: vec![KvEvent::AllBlocksCleared], ..EventBatch::default() });
    assert_eq!(idx.lookup(&[1]).len(), 1);
    assert_eq!(idx.remove_endpoint("b"), 3);
    assert!(idx.lookup(&[1]).is_empty());
    assert_eq!(idx.entries(), 0);
}

#[derive(Debug, Clone)]
enum Op {
    Store(u8, u8, Vec<u8>),
    Remove(u8, u8, Vec<u8>),
    Clear(u8),
    Drop(u8),
    Lookup(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    let keys = proptest::collection::vec(0u8..24, 0..10);
    prop_oneof![
        6 => (0u8..4, 0u8..2, keys.clone()).prop_map(|(e, t, k)| Op::Store(e, t, k)),
        3 => (0u8..4, 0u8..2, keys.clone()).prop_map(|(e, t, k)| Op::Remove(e, t, k)),
        1 => (0u8..4).prop_map(Op::Clear),
        1 => (0u8..4).prop_map(Op::Drop),
        4 => keys.prop_map(Op::Lookup),
    ]
}

/// Naive model: (endpoint, key) -> tier -> refcount.
type Model = HashMap<(u8, u64), BTreeMap<u8, u32>>;

fn model_lookup(m: &Model, keys: &[u64]) -> BTreeMap<String, (usize, f64)> {
    let w = TierWeights::default();
    let mut out = BTreeMap::new();
    for ep in 0..4u8 {
        // Blocks per best tier (highest weight, lowest id among equals).
        let (mut n, mut per_tier) = (0, [0u32; Tier::COUNT]);
        for k in keys {
            match m.get(&(ep, *k)).filter(|t| !t.is_empty()) {
                Some(t) => {
                    n += 1;
                    let weight = |t: u8| w.of(Tier::from_id(t));
                    let best = t.keys().copied().fold(u8::MAX, |b, t| {
                        if b == u8::MAX || weight(t) > weight(b) || (weight(t) == weight(b) && t < b) { t } else { b }
                    });
                    per_tier[usize::from(best)] += 1;
                }
                None => break,
            }
        }
        if n > 0 {
            let s: f64 = (0..Tier::COUNT).map(|t| f64::from(per_tier[t]) * w.0[t]).sum();
            out.insert(format!("ep{ep}"), (n, s));
        }
    }
    out
}

fn run_ops(ops: Vec<Op>, mode: AddMode) -> Result<(), TestCaseError> {
    let idx = engine_index();
    let mut m: Model = HashMap::new();
    let key = |k: u8| u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15); // includes key 0
    let rm_mode = if mode == AddMode::Counted { RemoveMode::Release } else { RemoveMode::Force };
    for op in ops {
        match op {
            Op::Store(e, t, ks) => {
                let ks: Vec<u64> = ks.into_iter().map(key).collect();
                idx.store_keys(&format!("ep{e}"), Tier::from_id(t), &ks, mode);
                for k in ks {
                    let c = m.entry((e, k)).or_default().entry(t).or_insert(0);
                    *c = if mode == AddMode::Counted { *c + 1 } else { 1 };
                }
            }
            Op::Remove(e, t, ks) => {
                let ks: Vec<u64> = ks.into_iter().map(key).collect();
                idx.remove_keys(&format!("ep{e}"), Tier::from_id(t), &ks, rm_mode);
                for k in ks {
                    if let Some(tiers) = m.get_mut(&(e, k))
                        && let Some(c) = tiers.get_mut(&t)
                    {
                        *c = if rm_mode == RemoveMode::Release { *c - 1 } else { 0 };
                        if *c == 0 {
                            tiers.remove(&t);
                        }
                    }
                }
            }
            Op::Clear(e) => {
                idx.clear_endpoint(&format!("ep{e}"));
                m.retain(|(ep, _), _| *ep != e);
            }
            Op::Drop(e) => {
                idx.remove_endpoint(&format!("ep{e}"));
                m.retain(|(ep, _), _| *ep != e);
            }
            Op::Lookup(ks) => {
                let ks: Vec<u64> = ks.into_iter().map(key).collect();
                let got: BTreeMap<_, _> =
                    idx.lookup(&ks).into_iter().map(|x| (x.endpoint.to_string(), (x.blocks, x.weighted))).collect();
                prop_assert_eq!(got, model_lookup(&m, &ks));
            }
        }
        let want: usize = m.values().map(BTreeMap::len).sum();
        prop_assert_eq!(idx.entries(), want);
        let mut want_blocks: BTreeMap<String, u64> = BTreeMap::new();
        for ((e, _), tiers) in &m {
            if !tiers.is_empty() {
                *want_blocks.entry(format!("ep{e}")).or_default() += 1;
            }
        }
        let got_blocks: BTreeMap<String, u64> =
            idx.blocks_by_endpoint().into_iter().filter(|(_, n)| *n > 0).map(|(e, n)| (e.to_string(), n)).collect();
        prop_assert_eq!(got_blocks, want_blocks);
    }
    Ok(())
}

#[test]
fn blocks_by_endpoint_count_keys_once_across_tiers() {
    let idx = engine_index();
    idx.store_keys("a", Tier::Gpu, &[0, 1, 2, 3], AddMode::Set);
    idx.store_keys("a", Tier::Cpu, &[1, 2], AddMode::Set);
    idx.store_keys("b", Tier::Gpu, &[1], AddMode::Set);
    idx.store_keys("c", Tier::Gpu, &[1], AddMode::Set);
    let blocks: BTreeMap<String, u64> = idx.blocks_by_endpoint().into_iter().map(|(e, n)| (e.to_string(), n)).collect();
    assert_eq!(blocks, BTreeMap::from([("a".into(), 4), ("b".into(), 1), ("c".into(), 1)]));
    idx.clear_endpoint("b");
    idx.remove_endpoint("c");
    let blocks: BTreeMap<String, u64> = idx.blocks_by_endpoint().into_iter().map(|(e, n)| (e.to_string(), n)).collect();
    assert_eq!(
        blocks,
        BTreeMap::from([("a".into(), 4), ("b".into(), 0)]),
        "a cleared endpoint stays, a removed one goes"
    );
}

proptest! {
    #[test]
    fn matches_naive_model_set_semantics(ops in proptest::collection::vec(op(), 1..80)) {
        run_ops(ops, AddMode::Set)?;
    }

    #[test]
    fn matches_naive_model_refcounted(ops in proptest::collection::vec(op(), 1..80)) {
        run_ops(ops, AddMode::Counted)?;
    }
}

/// Request-key mode against a model with exact engine-hash -> request-key maps
/// (the compact engine map keeps 32-bit fingerprints and key references).
mod request_mode {
    use super::*;
    use crate::kvcache::events::{BlockRemoved, BlockStored};

    const BS: usize = 2;

    #[derive(Debug, Clone)]
    enum ROp {
        /// (endpoint, rank, tier, parent chain index or root, block tokens).
        Store(u8, u8, u8, Option<usize>, Vec<u8>),
        /// (endpoint, rank, tier, chain indexes).
        Remove(u8, u8, u8, Vec<usize>),
        Clear(u8),
    }

    fn rop() -> impl Strategy<Value = ROp> {
        prop_oneof![
            6 => (0u8..2, 0u8..2, 0u8..2, proptest::option::of(0usize..64), proptest::collection::vec(0u8..3, BS..4 * BS))
                .prop_map(|(e, r, t, p, toks)| ROp::Store(e, r, t, p, toks)),
            3 => (0u8..2, 0u8..2, 0u8..2, proptest::collection::vec(0usize..64, 1..4))
                .prop_map(|(e, r, t, c)| ROp::Remove(e, r, t, c)),
            1 => (0u8..2).prop_map(ROp::Clear),
        ]
    }

    /// vLLM-like engine hash: a function of the parent hash and the block's tokens.
    fn engine_hash(parent: u64, block: &[u32]) -> u64 {
        block
            .iter()
            .fold(parent ^ 0x5851_F42D_4C95_7F2D, |h, t| (h ^ u64::from(*t)).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            | 1
    }

    #[derive(Default)]
    struct Model {
        /// (ep, rank) -> (engine hash, tier) -> request key.
        maps: HashMap<(u8, u8), HashMap<(u64, u8), u64>>,
        /// (key, ep, tier) -> references.
        refs: HashMap<(u64, u8, u8), u32>,
    }

    impl Model {
        fn parent_key(&self, src: (u8, u8), parent: u64) -> Option<u64> {
            let map = self.maps.get(&src)?;
            (0..Tier::COUNT as u8).find_map(|t| map.get(&(parent, t)).copied())
        }
    }

    fn run(ops: Vec<ROp>) -> Result<(), TestCaseError> {
        let idx = request_index(BS);
        let keyer = RequestKeyer::default();
        let mut model = Model::default();
        // Engine hashes of every block ever published, and their request keys by source.
        let mut chains: Vec<u64> = Vec::new();
        let mut all_keys: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                ROp::Store(e, r, t, parent, toks) => {
                    let toks: Vec<u32> = toks.iter().map(|t| u32::from(*t)).take(toks.len() / BS * BS).collect();
                    let parent_hash = parent.and_then(|p| chains.get(p).copied());
                    let mut hashes = Vec::new();
                    let mut h = parent_hash.unwrap_or(0);
                    for block in toks.chunks(BS) {
                        h = engine_hash(h, block);
                        hashes.push(h);
                    }
                    let src = (e, r);
                    let parent_key = match parent_hash {
                        None => Some(keyer.root("m")),
                        Some(p) => model.parent_key(src, p),
                    };
                    if let Some(pk) = parent_key {
                        let keys = keyer.chain(pk, &toks, BS, &[]);
                        let map = model.maps.entry(src).or_default();
                        for (eh, k) in hashes.iter().zip(&keys) {
                            if map.insert((*eh, t), *k).is_none() {
                                *model.refs.entry((*k, e, t)).or_insert(0) += 1;
                            }
                        }
                        all_keys.extend(keys);
                    }
                    chains.extend(&hashes);
                    let ev = KvEvent::BlockStored(BlockStored {
                        block_hashes: hashes,
                        parent_block_hash: parent_hash,
                        token_ids: toks,
                        block_size: BS as u32,
                        medium: Some(Tier::from_id(t)),
                        ..BlockStored::default()
                    });
                    let batch = EventBatch {
                        events: vec![ev],
                        data_parallel_rank: Some(u32::from(r)),
                        ..EventBatch::default()
                    };
                    idx.apply(&format!("ep{e}"), "m", &batch);
                }
                ROp::Remove(e, r, t, which) => {
                    let hashes: Vec<u64> = which.iter().filter_map(|i| chains.get(*i).copied()).collect();
                    if let Some(map) = model.maps.get_mut(&(e, r)) {
                        for eh in &hashes {
                            if let Some(k) = map.remove(&(*eh, t)) {
                                let c = model.refs.get_mut(&(k, e, t)).expect("counted");
                                *c -= 1;
                                if *c == 0 {
                                    model.refs.remove(&(k, e, t));
                                }
                            }
                        }
                    }
                    let ev = KvEvent::BlockRemoved(BlockRemoved {
                        block_hashes: hashes,
                        medium: Some(Tier::from_id(t)),
                        ..BlockRemoved::default()
                    });
                    let batch = EventBatch {
                        events: vec![ev],
                        data_parallel_rank: Some(u32::from(r)),
                        ..EventBatch::default()
                    };
                    idx.apply(&format!("ep{e}"), "m", &batch);
                }
                ROp::Clear(e) => {
                    model.maps.retain(|(ep, _), _| *ep != e);
                    model.refs.retain(|(_, ep, _), _| *ep != e);
                    let batch = EventBatch { events: vec![KvEvent::AllBlocksCleared], ..EventBatch::default() };
                    idx.apply(&format!("ep{e}"), "m", &batch);
                }
            }
            prop_assert_eq!(idx.entries(), model.refs.len());
            for k in &all_keys {
                let mut want: Vec<String> = (0..2u8)
                    .filter(|e| (0..2u8).any(|t| model.refs.contains_key(&(*k, *e, t))))
                    .map(|e| format!("ep{e}"))
                    .collect();
                let mut got: Vec<String> = idx.lookup(&[*k]).into_iter().map(|m| m.endpoint.to_string()).collect();
                want.sort();
                got.sort();
                prop_assert_eq!(got, want, "holders of key {}", k);
            }
        }
        prop_assert_eq!(idx.ambiguous_refs(), 0);
        Ok(())
    }

    proptest! {
        #[test]
        fn request_keys_match_an_exact_engine_map(ops in proptest::collection::vec(rop(), 1..60)) {
            run(ops)?;
        }
    }
}
