//! Full in-process decision (parse + default pipeline + pre-request) for 1/10/100 KB chat
//! bodies over 8 endpoints, and 10 KB bodies over 8/64/256 endpoints.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use epp::bench::synthetic;
use epp::endpoints::model::MetricsState;
use epp::endpoints::store::EndpointStore;
use epp::extproc::decide::decide;
use epp::plugins::registry::BuildContext;
use epp::request::headers::RequestHeaders;
use epp::scheduling::metrics::SchedulerMetrics;

fn setup(n: usize) -> (EndpointStore, epp::config::LoadedConfig) {
    let store = EndpointStore::new();
    store.replace(synthetic::endpoints(n));
    for (i, e) in store.snapshot().entries.iter().enumerate() {
        let mut m = MetricsState { updated_at: Some(tokio::time::Instant::now()), ..Default::default() };
        m.metrics.waiting_queue_size = (i % 7) as u64;
        m.metrics.kv_cache_usage = (i % 10) as f64 / 10.0;
        e.metrics.store(Arc::new(m));
    }
    let cx = BuildContext { endpoints: store.clone(), ..Default::default() };
    let loaded = epp::app::load_config(None, &cx, SchedulerMetrics::detached()).expect("default config");
    (store, loaded)
}

fn bench(c: &mut Criterion) {
    let headers = RequestHeaders { all: vec![(":path".into(), "/v1/chat/completions".into())] };
    let metadata = Default::default();
    let mut g = c.benchmark_group("decision_by_body");
    for kb in [1usize, 10, 100] {
        let (store, loaded) = setup(8);
        let bodies: Vec<Vec<u8>> = (0..32).map(|i| synthetic::chat_body(kb * 1000, i % 8, i)).collect();
        g.throughput(Throughput::Bytes((kb * 1000) as u64));
        let mut i = 0;
        g.bench_function(BenchmarkId::from_parameter(format!("{kb}KB")), |b| {
            b.iter(|| {
                i += 1;
                decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % bodies.len()], true).expect("decides")
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("decision_by_endpoints");
    for n in [8usize, 64, 256] {
        let (store, loaded) = setup(n);
        let bodies: Vec<Vec<u8>> = (0..32).map(|i| synthetic::chat_body(10_000, i % 8, i)).collect();
        let mut i = 0;
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                i += 1;
                decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % bodies.len()], true).expect("decides")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
