//! Decision-path lookup: the shared Redis index against the in-memory index, one sitting, same
//! data (chains of blocks on 1-3 of 64 endpoints, engine-key mode), same queries. Starts its own
//! `redis-server` on a free loopback port (no persistence) and prints p50/p99 of each and their
//! ratio for 8-, 32-, 128- and 1024-block prompts (128 to 16k tokens at block 16).
//!
//! `cargo bench --bench redis_index -- --quick`

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use epp::kvcache::events::{BlockStored, EventBatch, KvEvent, Tier};
use epp::kvcache::index::{AddMode, IndexConfig, KeyMode, PrefixIndex, TierWeights};
use epp::kvcache::{KvCacheMetrics, RedisIndex, RedisIndexConfig};

/// The binaries' allocator, so figures match what `epp` does (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

const ENDPOINTS: usize = 64;
const CHAINS: usize = 512;
const CHAIN: usize = 1024;
const SAMPLES: usize = 4000;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A redis-server child on a free loopback port, killed on drop.
struct Server(Child, u16);

impl Server {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server installed");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        for line in out.lines().map_while(Result::ok) {
            if line.contains("Ready to accept connections") {
                break;
            }
        }
        Server(child, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn p(lat: &mut [Duration], f: f64) -> f64 {
    lat.sort_unstable();
    lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6
}

fn lookup_benches(c: &mut Criterion) {
    let server = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mode = KeyMode::Engine { hasher: None, block_size: 16 };
    let memory = PrefixIndex::new(IndexConfig { key_mode: mode.clone(), ..IndexConfig::default() });
    let metrics = Arc::new(KvCacheMetrics::register(&prometheus::Registry::new()).expect("metrics"));
    let config = RedisIndexConfig {
        address: format!("redis://127.0.0.1:{}", server.1),
        lookup_timeout: Duration::from_secs(5),
        write_timeout: Duration::from_secs(5),
        key_mode: mode,
        tier_weights: TierWeights::default(),
    };
    let redis = RedisIndex::try_new(config, metrics).expect("address");
    let mut rng = 42u64;
    let chains: Vec<Vec<u64>> = (0..CHAINS).map(|_| (0..CHAIN).map(|_| splitmix(&mut rng)).collect()).collect();
    for chain in &chains {
        let holders = 1 + (splitmix(&mut rng) % 3) as usize;
        for h in 0..holders {
            let ep = format!("pod-{}", (splitmix(&mut rng) as usize + h) % ENDPOINTS);
            memory.store_keys(&ep, Tier::Gpu, chain, AddMode::Set);
            let stored = BlockStored { block_hashes: chain.clone(), block_size: 16, ..BlockStored::default() };
            let batch = EventBatch { events: vec![KvEvent::BlockStored(stored)], ..EventBatch::default() };
            rt.block_on(redis.apply(&ep, "m", &batch));
        }
    }
    for blocks in [8, 32, 128, 1024] {
        let mut mem_lat = Vec::with_capacity(SAMPLES);
        let mut redis_lat = Vec::with_capacity(SAMPLES);
        let mut rng = 7u64;
        for _ in 0..SAMPLES {
            let q = &chains[splitmix(&mut rng) as usize % CHAINS][..blocks];
            let t0 = Instant::now();
            let m = black_box(memory.lookup(black_box(q)));
            mem_lat.push(t0.elapsed());
            let t0 = Instant::now();
            let r = black_box(rt.block_on(redis.lookup(black_box(q))).expect("redis answers"));
            redis_lat.push(t0.elapsed());
            assert_eq!(m.len(), r.len(), "both indexes hold the same holders");
        }
        let (m50, m99, r50, r99) =
            (p(&mut mem_lat, 0.5), p(&mut mem_lat, 0.99), p(&mut redis_lat, 0.5), p(&mut redis_lat, 0.99));
        println!(
            "redis_index: lookup{blocks} memory p50_us={m50:.2} p99_us={m99:.2} | redis p50_us={r50:.1} p99_us={r99:.1} | ratio p50={:.0}x p99={:.0}x",
            r50 / m50,
            r99 / m99
        );
    }
    let mut rng = 9u64;
    c.bench_function("memory_lookup_128_blocks", |b| {
        b.iter(|| black_box(memory.lookup(&chains[splitmix(&mut rng) as usize % CHAINS][..128])))
    });
    c.bench_function("redis_lookup_128_blocks", |b| {
        b.iter(|| black_box(rt.block_on(redis.lookup(&chains[splitmix(&mut rng) as usize % CHAINS][..128]))))
    });
}

criterion_group!(benches, lookup_benches);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
