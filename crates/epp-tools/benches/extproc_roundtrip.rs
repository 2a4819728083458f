//! Loopback ext_proc round trip through the real server (h2c): one stream per request, as
//! Envoy does, in full-duplex (headers + 10 KB body -> headers reply + echoed body) and
//! buffered (headers reply, then body -> body reply) modes. Endpoints have no metrics server
//! (scrapes fail and are counted), which does not change the decision path's cost.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use epp::app::{App, Settings};
use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp_tools::bench::extproc::args::BodyMode;
use epp_tools::bench::extproc::workload;
use epp_tools::bench::synthetic;
use tokio_stream::StreamExt;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("endpoints.yaml");
    let mut yaml = String::from("endpoints:\n");
    for e in synthetic::endpoints(8) {
        yaml.push_str(&format!("  - {{name: {}, address: \"127.0.0.1\", port: 1, metricsPort: 1}}\n", e.id));
    }
    std::fs::write(&file, yaml).expect("write");
    let mut settings = Settings::loopback();
    settings.endpoints_file = Some(file);
    settings.refresh_metrics_interval = Duration::from_secs(3600);
    let app = rt.block_on(App::start(settings)).expect("start");
    let mut client =
        rt.block_on(ExternalProcessorClient::connect(format!("http://{}", app.grpc_addr))).expect("connect");
    let payload = synthetic::chat_body(10_000, 1, 1);
    for (name, mode, replies) in
        [("full_duplex_10KB", BodyMode::FullDuplex, 2usize), ("buffered_10KB", BodyMode::Buffered, 2)]
    {
        c.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    // Headers, then the whole body in one message (as Envoy sends 10 KB).
                    let msgs = workload::sequence(mode, &payload, usize::MAX);
                    let mut stream = client.process(tokio_stream::iter(msgs)).await.expect("stream").into_inner();
                    for _ in 0..replies {
                        stream.next().await.expect("reply").expect("ok");
                    }
                    // The client half-closed after its two messages; the server then ends the
                    // stream, as with Envoy.
                    assert!(stream.next().await.is_none());
                })
            })
        });
    }
    rt.block_on(app.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);
