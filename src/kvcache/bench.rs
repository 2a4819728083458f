//! `epp bench index`: replays a workload written by
//! `tools/workload/workload.py` against the index and checks every answer.
//!
//! Files (see the tool's docstring): `events.jsonl` (`{"pod", "op":
//! "stored"|"removed", "hashes", "parent"}`), `queries_L{L}.jsonl` (lists of
//! u64 block hashes), `expected_L{L}.jsonl` (`{"<pod>": run}`), and
//! `manifest.json` (`params.query_lengths`). The hashes are used as index keys
//! directly (engine-key mode, set semantics, as the tool's naive replay).
//! Stores and removals are timed separately; each lookup is timed alone.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::events::Tier;
use super::index::{AddMode, IndexConfig, KeyMode, PrefixIndex, RemoveMode};

/// Result of one replay; printed as one JSON line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IndexBenchReport {
    pub stored_blocks_per_s: f64,
    pub removed_blocks_per_s: f64,
    pub lookup_p50_us: f64,
    pub lookup_p99_us: f64,
    pub bytes_per_entry: f64,
    pub mismatches: u64,
    pub queries: u64,
    pub stored_blocks: u64,
    pub removed_blocks: u64,
    pub entries: u64,
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
pub fn run_index_bench(dir: &Path) -> Result<IndexBenchReport, BenchError> {
    let mpath = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(&mpath).map_err(|source| BenchError::Io { path: mpath.clone(), source })?,
    )
    .map_err(|source| BenchError::Json { path: mpath.clone(), line: 1, source })?;
    let epath = dir.join("events.jsonl");
    let events: Vec<Event> = lines(&epath)?;
    let total: usize = events.iter().filter(|e| e.op == "stored").map(|e| e.hashes.len()).sum();
    let index = PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Engine { hasher: None, block_size: 16 },
        capacity: total.max(1 << 16),
        ..IndexConfig::default()
    });
    let pods: Vec<String> = (0..=events.iter().map(|e| e.pod).max().unwrap_or(0)).map(|p| p.to_string()).collect();
    let (mut t_store, mut t_remove) = (Duration::ZERO, Duration::ZERO);
    let (mut stored, mut removed) = (0u64, 0u64);
    for e in &events {
        let pod = &pods[e.pod as usize];
        let t0 = Instant::now();
        match e.op.as_str() {
            "stored" => {
                index.store_keys(pod, Tier::Gpu, &e.hashes, AddMode::Set);
                t_store += t0.elapsed();
                stored += e.hashes.len() as u64;
            }
            "removed" => {
                index.remove_keys(pod, Tier::Gpu, &e.hashes, RemoveMode::Force);
                t_remove += t0.elapsed();
                removed += e.hashes.len() as u64;
            }
            other => return Err(BenchError::Format { path: epath, what: format!("unknown op {other:?}") }),
        }
    }
    let mut latencies = Vec::new();
    let mut mismatches = 0;
    for l in manifest.params.query_lengths {
        let qpath = dir.join(format!("queries_L{l}.jsonl"));
        let queries: Vec<Vec<u64>> = lines(&qpath)?;
        let expected: Vec<BTreeMap<String, usize>> = lines(&dir.join(format!("expected_L{l}.jsonl")))?;
        if queries.len() != expected.len() {
            return Err(BenchError::Format { path: qpath, what: "query and expected counts differ".into() });
        }
        for (q, want) in queries.iter().zip(&expected) {
            let t0 = Instant::now();
            let got = index.lookup(q);
            latencies.push(t0.elapsed());
            let got: BTreeMap<String, usize> = got.into_iter().map(|m| (m.endpoint.to_string(), m.blocks)).collect();
            mismatches += u64::from(&got != want);
        }
    }
    latencies.sort_unstable();
    let entries = index.entries() as u64;
    let rate = |n: u64, t: Duration| if t.is_zero() { 0.0 } else { n as f64 / t.as_secs_f64() };
    Ok(IndexBenchReport {
        stored_blocks_per_s: rate(stored, t_store),
        removed_blocks_per_s: rate(removed, t_remove),
        lookup_p50_us: percentile_us(&latencies, 0.50),
        lookup_p99_us: percentile_us(&latencies, 0.99),
        bytes_per_entry: if entries == 0 { 0.0 } else { index.table_bytes() as f64 / entries as f64 },
        mismatches,
        queries: latencies.len() as u64,
        stored_blocks: stored,
        removed_blocks: removed,
        entries,
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
        let r = run_index_bench(&dir).expect("runs");
        assert_eq!((r.mismatches, r.queries, r.stored_blocks, r.removed_blocks, r.entries), (0, 3, 6, 1, 5));
        tiny(&dir, true);
        assert_eq!(run_index_bench(&dir).expect("runs").mismatches, 1);
        assert!(serde_json::to_string(&r).expect("json").contains("\"lookup_p99_us\""));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(run_index_bench(&dir), Err(BenchError::Io { .. })));
    }
}
