//! Decoder tests: every public vector, hand-encoded llm-d vectors, fuzzing.

use super::*;
use proptest::prelude::*;
use serde_json::Value as Json;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kv_events")
}

fn json_hash(v: &Json) -> u64 {
    match v {
        Json::Number(n) => n.as_u64().expect("u64 hash in vector"),
        Json::String(hex) => {
            let bytes = hex_decode(hex);
            bytes[bytes.len() - 8..].iter().fold(0, |a, b| (a << 8) | u64::from(*b))
        }
        other => panic!("unexpected hash {other}"),
    }
}

pub(crate) fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn json_extra(v: &Json) -> ExtraKey {
    match v {
        Json::String(s) => ExtraKey::Str(s.clone()),
        Json::Array(p) => {
            ExtraKey::Mm { identifier: p[0].as_str().expect("id").to_owned(), offset: p[1].as_i64().expect("offset") }
        }
        Json::Object(o) => ExtraKey::Bytes(hex_decode(o["bytes_hex"].as_str().expect("hex"))),
        other => panic!("unexpected extra key {other}"),
    }
}

fn expected_event(e: &Json) -> KvEvent {
    let medium = e.get("medium").and_then(Json::as_str).map(|m| Tier::from_medium(Some(m)));
    let hashes = |e: &Json| e["block_hashes"].as_array().expect("hashes").iter().map(json_hash).collect();
    match e["type"].as_str().expect("type") {
        "BlockStored" => KvEvent::BlockStored(BlockStored {
            block_hashes: hashes(e),
            parent_block_hash: (!e["parent_block_hash"].is_null()).then(|| json_hash(&e["parent_block_hash"])),
            token_ids: e["token_ids"]
                .as_array()
                .expect("tokens")
                .iter()
                .map(|t| t.as_u64().expect("tok") as u32)
                .collect(),
            block_size: e["block_size"].as_u64().expect("bs") as u32,
            lora_id: e["lora_id"].as_u64(),
            medium,
            lora_name: e.get("lora_name").and_then(Json::as_str).map(str::to_owned),
            extra_keys: e
                .get("extra_keys")
                .and_then(Json::as_array)
                .map(|blocks| blocks.iter().map(|b| b.as_array().map(|k| k.iter().map(json_extra).collect())).collect())
                .unwrap_or_default(),
            group_idx: e.get("group_idx").and_then(Json::as_u64).map(|g| g as u32),
            kv_cache_spec_kind: e.get("kv_cache_spec_kind").and_then(Json::as_str).map(str::to_owned),
        }),
        "BlockRemoved" => KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: hashes(e),
            medium,
            group_idx: e.get("group_idx").and_then(Json::as_u64).map(|g| g as u32),
        }),
        "AllBlocksCleared" => KvEvent::AllBlocksCleared,
        other => panic!("unexpected type {other}"),
    }
}

fn vector_names(dir: &str) -> Vec<PathBuf> {
    let mut names: Vec<_> = std::fs::read_dir(fixtures().join(dir))
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    names.sort();
    names
}

#[test]
fn decodes_every_public_vector() {
    let mut seen = 0;
    for dir in ["events", "legacy"] {
        for bin in vector_names(dir) {
            let payload = std::fs::read(&bin).expect("bin");
            let meta: Json =
                serde_json::from_slice(&std::fs::read(bin.with_extension("json")).expect("json")).expect("json");
            assert_eq!(payload.len() as u64, meta["payload_len"].as_u64().expect("len"), "{bin:?}");
            let batch = decode_batch(&payload).unwrap_or_else(|e| panic!("{bin:?}: {e}"));
            let d = &meta["decoded"];
            assert_eq!(batch.ts, d["ts"].as_f64().expect("ts"));
            assert_eq!(batch.data_parallel_rank, d["data_parallel_rank"].as_u64().map(|r| r as u32), "{bin:?}");
            let want: Vec<KvEvent> = d["events"].as_array().expect("events").iter().map(expected_event).collect();
            assert_eq!(batch.events, want, "{bin:?}");
            assert_eq!(batch.unknown_events, 0);
            seen += 1;
        }
    }
    assert_eq!(seen, 11);
}

#[test]
fn decodes_llmd_array_vector_and_bytes_hash() {
    let p = hex_decode("93cb41d954fc402000009199ab426c6f636b53746f726564921112c098010203040506070804c0a3475055c0c000");
    let b = decode_batch(&p).expect("array form");
    let KvEvent::BlockStored(s) = &b.events[0] else { panic!("stored") };
    assert_eq!(s.block_hashes, vec![17, 18]);
    assert_eq!(s.parent_block_hash, None);
    assert_eq!(s.token_ids, (1..=8).collect::<Vec<u32>>());
    assert_eq!((s.block_size, s.medium), (4, Some(Tier::Gpu)));
    let mut p = hex_decode("92cb41d954fc402000009193ac426c6f636b52656d6f76656491c420");
    p.extend([0u8; 31]);
    p.push(0x11);
    p.extend(hex_decode("a3475055"));
    let b = decode_batch(&p).expect("bytes form");
    assert_eq!(b.data_parallel_rank, None);
    assert_eq!(
        b.events,
        vec![KvEvent::BlockRemoved(BlockRemoved { block_hashes: vec![17], medium: Some(Tier::Gpu), group_idx: None })]
    );
}

#[test]
fn negative_int_hash_is_reinterpreted_and_unknown_tags_skipped() {
    // [0.0, [["BlockRemoved", [-1], nil], ["Future", 1]], nil]
    let p = hex_decode(
        "93cb00000000000000009293ac426c6f636b52656d6f76656491ffc092a6467574757265 01c0".replace(' ', "").as_str(),
    );
    let b = decode_batch(&p).expect("decodes");
    assert_eq!(b.unknown_events, 1);
    assert_eq!(
        b.events,
        vec![KvEvent::BlockRemoved(BlockRemoved { block_hashes: vec![u64::MAX], medium: None, group_idx: None })]
    );
}

#[test]
fn rejects_malformed_shapes() {
    assert!(matches!(decode_batch(&[]), Err(DecodeError::Msgpack(_))));
    assert!(matches!(decode_batch(&[0x01]), Err(DecodeError::NotABatch)));
    assert!(matches!(decode_batch(&[0x92, 0x00, 0x90, 0x00]), Err(DecodeError::TrailingBytes(1))));
    // [0, [["BlockStored"]]] : block_hashes missing
    let p = hex_decode("920091 91ab426c6f636b53746f726564".replace(' ', "").as_str());
    assert!(matches!(decode_batch(&p), Err(DecodeError::MissingField { .. })));
    // empty bytes hash is an error
    let p = hex_decode("920091 92ac426c6f636b52656d6f766564 91c400".replace(' ', "").as_str());
    assert!(matches!(decode_batch(&p), Err(DecodeError::BadField { .. })));
}

proptest! {
    #[test]
    fn never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_batch(&bytes);
    }

    #[test]
    fn never_panics_on_mutated_vectors(idx in 0usize..11, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let names: Vec<_> = ["events", "legacy"].iter().flat_map(|d| vector_names(d)).collect();
        let mut payload = std::fs::read(&names[idx % names.len()]).expect("bin");
        for (pos, byte) in flips {
            let n = payload.len();
            payload[pos % n] = byte;
        }
        let n = payload.len();
        payload.truncate(cut % (n + 1));
        let _ = decode_batch(&payload);
    }
}
