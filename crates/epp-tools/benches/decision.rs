//! Full in-process decision (parse + default pipeline + pre-request) for 1/10/100 KB chat
//! bodies over 8 endpoints, and 10 KB bodies over 8/64/256 endpoints.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use epp::extproc::decide::decide;
use epp::request::headers::RequestHeaders;
use epp_tools::bench::synthetic;

fn setup(n: usize) -> (epp::endpoints::store::EndpointStore, epp::config::LoadedConfig) {
    synthetic::default_pipeline(n).expect("default pipeline")
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
                decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % bodies.len()], true)
                    .expect("decides")
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
                decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % bodies.len()], true)
                    .expect("decides")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
