//! `epp-tools bench index`: replays a workload written by
//! `tools/workload/workload.py` against the index and checks every answer.
//!
//! Files (see the tool's docstring): `events.jsonl` (`{"pod", "op":
//! "stored"|"removed", "hashes", "parent"}`), `queries_L{L}.jsonl` (lists of
//! u64 block hashes), `expected_L{L}.jsonl` (`{"<pod>": run}`), and
//! `manifest.json` (`params.query_lengths`).
//!
//! Two key modes. `engine`: the hashes are the index keys (set semantics, as
//! the tool's naive replay). `request` (epp's default mode): every block gets
//! 16 token ids derived from its hash, so a block's tokens and parent decide
//! its hash as in vLLM; stores go through `PrefixIndex::apply` as `BlockStored`
//! events with tokens and parents (request keys computed, engine maps kept),
//! removals as `BlockRemoved`, and each query's request keys are computed from
//! its blocks' tokens (outside the timed lookup). `--key-algo` picks the
//! request-key algorithm (`epp-xxh3`, the plugin's default for an in-memory index and the tool's;
//! `cbor-fnv`, llm-d's). The tool guarantees every
//! stored parent is present, so both modes must give the expected answers.
//! Stores and removals are timed separately (event building excluded); each
//! lookup is timed alone (keys made before the timed loop, as in
//! `dynamo-rs`), reported over all queries and per query length
//! (`L<N>_p50_us`, `L<N>_p99_us`, `L<N>_mean_us`, as `dynamo-rs` names them).
//! `bytes_per_entry` covers key tables and engine maps.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use epp::kvcache::events::{BlockRemoved, BlockStored, EventBatch, KvEvent, Tier};
use epp::kvcache::index::{AddMode, IndexConfig, KeyMode, PrefixIndex, RemoveMode};
use epp::kvcache::keys::{RequestKeyAlgo, RequestKeyer};

/// Which keys the replay indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayKeys {
    /// epp's request keys from (derived) token ids, with engine maps.
    Request,
    /// The engine hashes themselves.
    Engine,
}

const BLOCK: usize = 16;
const MODEL: &str = "workload";

/// The 16 token ids standing for the content of the block with hash `h`.
fn block_tokens(h: u64, out: &mut Vec<u32>) {
    let mut x = h;
    out.extend((0..BLOCK).map(|_| {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        ((z ^ (z >> 27)) % 128_000) as u32
    }));
}

fn tokens_of(hashes: &[u64]) -> Vec<u32> {
    let mut tokens = Vec::with_capacity(hashes.len() * BLOCK);
    hashes.iter().for_each(|h| block_tokens(*h, &mut tokens));
    tokens
}

/// Result of one replay; printed as one JSON line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IndexBenchReport {
    pub stored_blocks_per_s: f64,
    pub removed_blocks_per_s: f64,
    pub lookup_p50_us: f64,
    pub lookup_p99_us: f64,
    pub bytes_per_entry: f64,
    /// Of which engine maps (request-key mode).
    pub engine_map_bytes_per_entry: f64,
    /// Engine-hash mappings held at the end (request-key mode).
    pub engine_mappings: u64,
    /// Engine-map key references that matched several keys of one source (each loses hits).
    pub ambiguous_refs: u64,
    pub mismatches: u64,
    pub queries: u64,
    pub stored_blocks: u64,
    pub removed_blocks: u64,
    pub entries: u64,
    /// Per query length `L`: `L<L>_p50_us`, `L<L>_p99_us` and `L<L>_mean_us` (the names
    /// `dynamo-rs` reports, so the two sides compare length by length).
    #[serde(flatten)]
    pub by_length: BTreeMap<String, f64>,
}

/// Replay failures.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line is not the expected JSON.
    #[error("{path}:{line}: invalid JSON")]
    Json {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    /// Structural problem (unknown op, query/expected count mismatch).
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
}

#[derive(Deserialize)]
struct Manifest {
    params: Params,
}

#[derive(Deserialize)]
struct Params {
    query_lengths: Vec<usize>,
}

#[derive(Deserialize)]
struct Event {
    pod: u32,
    op: String,
    hashes: Vec<u64>,
    #[serde(default)]
    parent: Option<u64>,
}

/// One event ready to apply in `mode`.
enum Prepared {
    Keys(bool),
    Batch(EventBatch),
}

fn prepare(e: &Event, mode: ReplayKeys, path: &Path) -> Result<Prepared, BenchError> {
    let stored = match e.op.as_str() {
        "stored" => true,
        "removed" => false,
        other => return Err(BenchError::Format { path: path.to_owned(), what: format!("unknown op {other:?}") }),
    };
    if mode == ReplayKeys::Engine {
        return Ok(Prepared::Keys(stored));
    }
    let event = if stored {
        KvEvent::BlockStored(BlockStored {
            block_hashes: e.hashes.clone(),
            parent_block_hash: e.parent,
            token_ids: tokens_of(&e.hashes),
            block_size: BLOCK as u32,
            ..BlockStored::default()
        })
    } else {
        KvEvent::BlockRemoved(BlockRemoved { block_hashes: e.hashes.clone(), ..BlockRemoved::default() })
    };
    Ok(Prepared::Batch(EventBatch { events: vec![event], ..EventBatch::default() }))
}

fn lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, BenchError> {
    let io = |source| BenchError::Io { path: path.to_owned(), source };
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|source| BenchError::Json {
            path: path.to_owned(),
            line: i + 1,
            source,
        })?);
    }
    Ok(out)
}

fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}

/// Replays the workload in `dir`; `mismatches > 0` means a wrong answer.
pub fn run_index_bench(dir: &Path, mode: ReplayKeys, algo: RequestKeyAlgo) -> Result<IndexBenchReport, BenchError> {
    let mpath = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(&mpath).map_err(|source| BenchError::Io { path: mpath.clone(), source })?,
    )
    .map_err(|source| BenchError::Json { path: mpath.clone(), line: 1, source })?;
    let epath = dir.join("events.jsonl");
    let events: Vec<Event> = lines(&epath)?;
    let total: usize = events.iter().filter(|e| e.op == "stored").map(|e| e.hashes.len()).sum();
    let keyer = RequestKeyer::new(algo, "");
    let key_mode = match mode {
        ReplayKeys::Engine => KeyMode::Engine { hasher: None, block_size: BLOCK },
        ReplayKeys::Request => KeyMode::Request { keyer, block_size: BLOCK },
    };
    let index = PrefixIndex::new(IndexConfig { key_mode, capacity: total.max(1 << 16), ..IndexConfig::default() });
    let pods: Vec<String> = (0..=events.iter().map(|e| e.pod).max().unwrap_or(0)).map(|p| p.to_string()).collect();
    let (mut t_store, mut t_remove) = (Duration::ZERO, Duration::ZERO);
    let (mut stored, mut removed) = (0u64, 0u64);
    for e in &events {
        let pod = &pods[e.pod as usize];
        let prepared = prepare(e, mode, &epath)?;
        let is_store = e.op == "stored";
        let t0 = Instant::now();
        match &prepared {
            Prepared::Keys(true) => index.store_keys(pod, Tier::Gpu, &e.hashes, AddMode::Set),
            Prepared::Keys(false) => index.remove_keys(pod, Tier::Gpu, &e.hashes, RemoveMode::Force),
            Prepared::Batch(batch) => {
                index.apply(pod, MODEL, batch);
            }
        }
        let took = t0.elapsed();
        if is_store {
            t_store += took;
            stored += e.hashes.len() as u64;
        } else {
            t_remove += took;
            removed += e.hashes.len() as u64;
        }
    }
    let mut latencies = Vec::new();
    let mut by_length = BTreeMap::new();
    let mut mismatches = 0;
    for l in manifest.params.query_lengths {
        let first = latencies.len();
        let qpath = dir.join(format!("queries_L{l}.jsonl"));
        let queries: Vec<Vec<u64>> = lines(&qpath)?;
        let expected: Vec<BTreeMap<String, usize>> = lines(&dir.join(format!("expected_L{l}.jsonl")))?;
        if queries.len() != expected.len() {
            return Err(BenchError::Format { path: qpath, what: "query and expected counts differ".into() });
        }
        // Every query's keys are made before the timed loop (as `dynamo-rs`
        // does); each answer is checked in place without allocating, so the
        // next lookup's result reuses its memory and no timed call pays for
        // frees or heap growth the checking caused.
        let keys: Vec<Vec<u64>> = queries
            .iter()
            .map(|q| match mode {
                ReplayKeys::Engine => q.clone(),
                ReplayKeys::Request => keyer.prompt_keys(MODEL, None, &tokens_of(q), BLOCK),
            })
            .collect();
        for (k, want) in keys.iter().zip(&expected) {
            let t0 = Instant::now();
            let got = index.lookup(k);
            latencies.push(t0.elapsed());
            let same = got.len() == want.len() && got.iter().all(|m| want.get(&*m.endpoint) == Some(&m.blocks));
            mismatches += u64::from(!same);
        }
        let of_length = &mut latencies[first..];
        of_length.sort_unstable();
        let mean = of_length.iter().sum::<Duration>().as_secs_f64() * 1e6 / of_length.len().max(1) as f64;
        by_length.insert(format!("L{l}_p50_us"), percentile_us(of_length, 0.50));
        by_length.insert(format!("L{l}_p99_us"), percentile_us(of_length, 0.99));
        by_length.insert(format!("L{l}_mean_us"), mean);
    }
    latencies.sort_unstable();
    let entries = index.entries() as u64;
    let per_entry = |bytes: usize| if entries == 0 { 0.0 } else { bytes as f64 / entries as f64 };
    let rate = |n: u64, t: Duration| if t.is_zero() { 0.0 } else { n as f64 / t.as_secs_f64() };
    Ok(IndexBenchReport {
        stored_blocks_per_s: rate(stored, t_store),
        removed_blocks_per_s: rate(removed, t_remove),
        lookup_p50_us: percentile_us(&latencies, 0.50),
        lookup_p99_us: percentile_us(&latencies, 0.99),
        bytes_per_entry: per_entry(index.approx_bytes()),
        engine_map_bytes_per_entry: per_entry(index.approx_bytes() - index.table_bytes()),
        engine_mappings: index.engine_mappings() as u64,
        ambiguous_refs: index.ambiguous_refs(),
        mismatches,
        queries: latencies.len() as u64,
        stored_blocks: stored,
        removed_blocks: removed,
        entries,
        by_length,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Writes a tiny workload in the tool's format; `lie` corrupts one answer.
    fn tiny(dir: &Path, lie: bool) {
        std::fs::create_dir_all(dir).expect("dir");
        let w = |name: &str, body: &str| {
            File::create(dir.join(name)).expect("create").write_all(body.as_bytes()).expect("write")
        };
        w("manifest.json", r#"{"format":"kv-prefix-workload/1","params":{"query_lengths":[3]}}"#);
        w(
            "events.jsonl",
            concat!(
                "{\"pod\":0,\"op\":\"stored\",\"hashes\":[11,12,13],\"parent\":null}\n",
                "{\"pod\":1,\"op\":\"stored\",\"hashes\":[11,12],\"parent\":null}\n",
                "{\"pod\":1,\"op\":\"stored\",\"hashes\":[18446744073709551615],\"parent\":12}\n",
                "{\"pod\":0,\"op\":\"removed\",\"hashes\":[13],\"parent\":null}\n",
            ),
        );
        w("queries_L3.jsonl", "[11,12,13]\n[11,12,18446744073709551615]\n[99,11,12]\n");
        let second = if lie { r#"{"0":2,"1":2}"# } else { r#"{"0":2,"1":3}"# };
        w("expected_L3.jsonl", &format!("{{\"0\":2,\"1\":2}}\n{second}\n{{}}\n"));
    }

    #[test]
    fn replays_and_checks_answers() {
        let dir = std::env::temp_dir().join(format!("epp-wl-{}", std::process::id()));
        tiny(&dir, false);
        let modes = [
            (ReplayKeys::Engine, RequestKeyAlgo::EppXxh3),
            (ReplayKeys::Request, RequestKeyAlgo::EppXxh3),
            (ReplayKeys::Request, RequestKeyAlgo::CborFnv),
        ];
        for (mode, algo) in modes {
            tiny(&dir, false);
            let r = run_index_bench(&dir, mode, algo).expect("runs");
            assert_eq!(
                (r.mismatches, r.queries, r.stored_blocks, r.removed_blocks, r.entries),
                (0, 3, 6, 1, 5),
                "{mode:?}"
            );
            assert!(r.bytes_per_entry > 0.0);
            assert_eq!(r.ambiguous_refs, 0, "{mode:?}");
            tiny(&dir, true);
            assert_eq!(run_index_bench(&dir, mode, algo).expect("runs").mismatches, 1, "{mode:?}");
            let json = serde_json::to_string(&r).expect("json");
            assert!(json.contains("\"lookup_p99_us\"") && json.contains("\"L3_p50_us\""), "{json}");
            assert_eq!(r.by_length.keys().collect::<Vec<_>>(), ["L3_mean_us", "L3_p50_us", "L3_p99_us"]);
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(
            run_index_bench(&dir, ReplayKeys::Request, RequestKeyAlgo::EppXxh3),
            Err(BenchError::Io { .. })
        ));
    }
}
