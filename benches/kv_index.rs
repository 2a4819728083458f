//! Prefix-index benchmarks: apply throughput on one thread, lookup of 128
//! blocks at ~10M entries (with p50/p99 printed), bytes per entry.
//!
//! `cargo bench --bench kv_index -- --quick`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use epp::kvcache::events::{BlockStored, EventBatch, KvEvent, Tier};
use epp::kvcache::index::{AddMode, IndexConfig, KeyMode, PrefixIndex, RemoveMode};
use epp::kvcache::keys::{RequestKeyer, request_keys};

/// The binaries' allocator, so figures match what `epp` does (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

const ENDPOINTS: usize = 64;
const CHAIN: usize = 128;
const TARGET_ENTRIES: usize = 10_000_000;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn engine_index(capacity: usize) -> PrefixIndex {
    PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Engine { hasher: None, block_size: 16 },
        capacity,
        ..IndexConfig::default()
    })
}

/// ~10M (block, endpoint) entries: chains of 128 keys, each on 1-3 endpoints.
fn big_index() -> (PrefixIndex, Vec<Vec<u64>>) {
    let idx = engine_index(TARGET_ENTRIES);
    let names: Vec<String> = (0..ENDPOINTS).map(|i| format!("pod-{i}")).collect();
    let mut rng = 42u64;
    let mut chains = Vec::new();
    let mut entries = 0;
    while entries < TARGET_ENTRIES {
        let chain: Vec<u64> = (0..CHAIN).map(|_| splitmix(&mut rng)).collect();
        let holders = 1 + (splitmix(&mut rng) % max_holders()) as usize;
        for h in 0..holders {
            let ep = &names[(splitmix(&mut rng) as usize + h) % ENDPOINTS];
            idx.store_keys(ep, Tier::Gpu, &chain, AddMode::Set);
            entries += CHAIN;
        }
        chains.push(chain);
    }
    (idx, chains)
}

fn percentiles(idx: &PrefixIndex, chains: &[Vec<u64>]) {
    let mut rng = 7u64;
    let mut lat: Vec<Duration> = (0..20_000)
        .map(|_| {
            let q = &chains[splitmix(&mut rng) as usize % chains.len()];
            let t0 = Instant::now();
            black_box(idx.lookup(black_box(q)));
            t0.elapsed()
        })
        .collect();
    lat.sort_unstable();
    let p = |f: f64| lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    let entries = idx.entries();
    println!(
        "kv_index: entries={entries} keys={} lookup128 p50_us={:.2} p99_us={:.2} table_bytes_per_entry={:.1}",
        idx.keys(),
        p(0.50),
        p(0.99),
        idx.table_bytes() as f64 / entries as f64
    );
}

fn apply_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("apply");
    // Engine-key mode: 16-block BlockStored then BlockRemoved events, one thread.
    let mut rng = 1u64;
    let events: Vec<Vec<u64>> = (0..4096).map(|_| (0..16).map(|_| splitmix(&mut rng)).collect()).collect();
    let idx = engine_index(1 << 22);
    g.throughput(Throughput::Elements(16 * events.len() as u64 * 2));
    g.bench_function("engine_keys_store_remove_16", |b| {
        b.iter(|| {
            for (i, e) in events.iter().enumerate() {
                idx.store_keys(if i % 2 == 0 { "pod-a" } else { "pod-b" }, Tier::Gpu, e, AddMode::Set);
            }
            for (i, e) in events.iter().enumerate() {
                idx.remove_keys(if i % 2 == 0 { "pod-a" } else { "pod-b" }, Tier::Gpu, e, RemoveMode::Force);
            }
        })
    });
    // Request-key mode: decoded BlockStored with tokens (re-keying included).
    let ridx = PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 16 },
        ..IndexConfig::default()
    });
    let batch = EventBatch {
        events: (0..64)
            .map(|i| {
                KvEvent::BlockStored(BlockStored {
                    block_hashes: (0..16).map(|j| i * 1000 + j).collect(),
                    token_ids: (0..256).map(|t| (t * 7 + i as u32) % 50_000).collect(),
                    block_size: 16,
                    ..BlockStored::default()
                })
            })
            .collect(),
        ..EventBatch::default()
    };
    g.throughput(Throughput::Elements(64 * 16));
    g.bench_function("request_keys_batch_64x16", |b| b.iter(|| black_box(ridx.apply("pod-a", "m", &batch))));
    g.finish();
    let toks: Vec<u32> = (0..2048).collect();
    c.bench_function("request_keys_2048_tokens", |b| {
        b.iter(|| black_box(request_keys("m", None, black_box(&toks), 16)))
    });
}

/// Request-key mode memory: (block, endpoint) entries stored from `BlockStored`
/// events with tokens (16 blocks each, on 1 to `max_holders` of 64 endpoints), up to ~10M;
/// key tables plus the engine maps, per entry, printed at each million (the
/// tables grow in steps, so the cost per entry depends on where the count
/// falls) and summarised as min / mean / max.
fn request_mode_memory(max_holders: u64) {
    let idx = PrefixIndex::new(IndexConfig {
        key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 16 },
        capacity: 1 << 24,
        ..IndexConfig::default()
    });
    let mut rng = 5u64;
    let mut next_report = 1_000_000;
    let mut totals = Vec::new();
    for chain in 0..(1_320_000 / (1 + max_holders)) {
        let tokens: Vec<u32> = (0..256).map(|_| (splitmix(&mut rng) % 100_000) as u32).collect();
        let ev = KvEvent::BlockStored(BlockStored {
            block_hashes: (0..16).map(|j| splitmix(&mut rng) ^ (chain * 16 + j)).collect(),
            token_ids: tokens,
            block_size: 16,
            ..BlockStored::default()
        });
        let batch = EventBatch { events: vec![ev], ..EventBatch::default() };
        for _ in 0..1 + splitmix(&mut rng) % max_holders {
            idx.apply(&format!("pod-{}", splitmix(&mut rng) % 64), "m", &batch);
        }
        let entries = idx.entries();
        if entries >= next_report {
            next_report += 1_000_000;
            let e = entries as f64;
            let (table, total) = (idx.table_bytes() as f64 / e, idx.approx_bytes() as f64 / e);
            totals.push(total);
            println!(
                "kv_index: request-key mode holders=1-{max_holders} entries={entries} table_bytes_per_entry={table:.1} engine_map_bytes_per_entry={:.1} total_bytes_per_entry={total:.1} process_rss_mib={:.0}",
                total - table,
                process_rss_mib()
            );
        }
    }
    let mean = totals.iter().sum::<f64>() / totals.len().max(1) as f64;
    let (min, max) = totals.iter().fold((f64::MAX, 0f64), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
    println!(
        "kv_index: request-key mode holders=1-{max_holders} total_bytes_per_entry min={min:.1} mean={mean:.1} max={max:.1}"
    );
}

fn lookup_benches(c: &mut Criterion) {
    request_mode_memory(3);
    request_mode_memory(1);
    let t0 = Instant::now();
    let (idx, chains) = big_index();
    println!(
        "kv_index: built {} entries in {:.1}s ({:.2} M entries/s)",
        idx.entries(),
        t0.elapsed().as_secs_f64(),
        idx.entries() as f64 / t0.elapsed().as_secs_f64() / 1e6
    );
    percentiles(&idx, &chains);
    let mut rng = 9u64;
    c.bench_function("lookup_128_blocks_10M_entries", |b| {
        b.iter(|| black_box(idx.lookup(&chains[splitmix(&mut rng) as usize % chains.len()])))
    });
}

criterion_group!(benches, apply_benches, lookup_benches);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// This process's resident set (`VmRSS` of `/proc/self/status`) in MiB; 0 where unreadable.
/// Printed next to the index's own byte count: what a process holding that many entries
/// occupies, the bench's few MiB of baseline included.
fn process_rss_mib() -> f64 {
    epp::memory::resident_kib().unwrap_or(0) as f64 / 1024.0
}

/// Endpoints per chain are 1..=N (env `KV_BENCH_MAX_HOLDERS`, default 3).
fn max_holders() -> u64 {
    std::env::var("KV_BENCH_MAX_HOLDERS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1)
}
