//! vLLM hashing against every public vector (exact preimages, digests, u64).

use super::*;
use serde_json::Value as Json;
use std::path::PathBuf;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn load(name: &str) -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kv_events/hashes").join(name);
    serde_json::from_slice(&std::fs::read(p).expect("fixture")).expect("json")
}

/// JSON form of `extra_keys_hashed` -> PyValue (arrays are tuples).
fn py<'a>(v: &'a Json, bytes: &'a mut Vec<Vec<u8>>) -> PyValue<'a> {
    fn conv<'a>(v: &'a Json) -> PyValue<'a> {
        match v {
            Json::Null => PyValue::None,
            Json::String(s) => PyValue::Str(s),
            Json::Number(n) => PyValue::Int(n.as_i64().expect("int")),
            Json::Array(a) => PyValue::Tuple(a.iter().map(conv).collect()),
            other => panic!("unsupported extra key {other}"),
        }
    }
    bytes.clear();
    conv(v)
}

#[test]
fn every_public_hash_vector_reproduces() {
    let mut blocks = 0;
    for file in [
        "block_hashes_sha256.json",
        "block_hashes_sha256_cbor.json",
        "block_hashes_xxhash.json",
        "block_hashes_xxhash_cbor.json",
    ] {
        let doc = load(file);
        for case in doc["cases"].as_array().expect("cases") {
            let id = case["id"].as_str().expect("id");
            let algo: HashAlgo = case["algo"].as_str().expect("algo").parse().expect("algo");
            let seed = case["none_hash_seed_string"].as_str().expect("seed");
            let mut pre = Vec::new();
            algo.serialize(&mut pre, &PyValue::Str(seed));
            assert_eq!(hex(&pre), case["none_hash_preimage_hex"].as_str().expect("pre"), "{id}");
            let none = algo.digest(&pre);
            assert_eq!(hex(none.as_bytes()), case["none_hash_hex"].as_str().expect("nh"), "{id}");
            let tokens: Vec<u32> =
                case["token_ids"].as_array().expect("t").iter().map(|t| t.as_u64().expect("tok") as u32).collect();
            let mut parent = none;
            let mut scratch = Vec::new();
            for b in case["blocks"].as_array().expect("blocks") {
                let r = b["token_range"].as_array().expect("range");
                let (s, e) = (r[0].as_u64().expect("s") as usize, r[1].as_u64().expect("e") as usize);
                let extra = py(&b["extra_keys_hashed"], &mut scratch);
                let extra = (!matches!(extra, PyValue::None)).then_some(extra);
                let mut pre = Vec::new();
                block_preimage(algo, &mut pre, &parent, &tokens[s..e], extra.as_ref());
                assert_eq!(hex(&pre), b["preimage_hex"].as_str().expect("pre"), "{id} block {s}");
                parent = algo.digest(&pre);
                assert_eq!(hex(parent.as_bytes()), b["hash_hex"].as_str().expect("h"), "{id}");
                assert_eq!(parent.to_u64(), b["hash_u64"].as_u64().expect("u64"), "{id}");
                blocks += 1;
            }
            // The high-level hasher derives the same chain from request settings.
            let pyseed = case["pythonhashseed"].as_str();
            let hasher = VllmHasher::try_new(algo, pyseed, VllmVersion::CURRENT).expect("reproducible");
            let lora = case["lora"]
                .as_object()
                .map(|l| (l["lora_name"].as_str().expect("n"), l["lora_path"].as_str().expect("p")));
            let extras = HashExtras { lora, cache_salt: case["cache_salt"].as_str() };
            let bs = case["block_size"].as_u64().expect("bs") as usize;
            let want: Vec<u64> =
                case["blocks"].as_array().expect("b").iter().map(|b| b["hash_u64"].as_u64().expect("u")).collect();
            assert_eq!(hasher.block_hashes_u64(&tokens, bs, &extras), want, "{id}");
        }
    }
    assert!(blocks >= 252, "{blocks}");
}

#[test]
fn none_hash_table_and_version_rules() {
    for e in load("none_hash.json")["entries"].as_array().expect("entries") {
        let algo: HashAlgo = e["algo"].as_str().expect("a").parse().expect("algo");
        let got = none_hash(algo, e["pythonhashseed"].as_str(), VllmVersion::CURRENT).expect("none hash");
        assert_eq!(hex(got.as_bytes()), e["none_hash_hex"].as_str().expect("h"));
    }
    assert!(none_hash(HashAlgo::Sha256, None, VllmVersion::new(0, 28)).is_err());
    assert!(none_hash(HashAlgo::Xxhash, None, VllmVersion::CURRENT).is_err());
    assert!(none_hash(HashAlgo::Sha256Cbor, Some("0"), VllmVersion::new(0, 11)).is_ok());
}

#[test]
fn worked_examples_of_reference() {
    let toks: Vec<u32> = (1..=8).collect();
    let h = VllmHasher::try_new(HashAlgo::Sha256Cbor, Some("42"), VllmVersion::CURRENT).expect("h");
    assert_eq!(h.block_hashes_u64(&toks, 4, &HashExtras::default()), [5988051177307384287, 11214766589215907092]);
    let h = VllmHasher::try_new(HashAlgo::Sha256, Some("42"), VllmVersion::CURRENT).expect("h");
    assert_eq!(h.block_hashes_u64(&toks, 4, &HashExtras::default()), [649359390096368487, 14757019014570657544]);
    let h = VllmHasher::try_new(HashAlgo::Sha256, None, VllmVersion::CURRENT).expect("h");
    assert_eq!(h.block_hashes_u64(&toks, 4, &HashExtras::default()), [1882140585328457242, 15284023028817948126]);
    assert_eq!(unhex("0a99")[0], 0x0a);
    assert_eq!("0.33.1".parse::<VllmVersion>(), Ok(VllmVersion::new(0, 33)));
}
