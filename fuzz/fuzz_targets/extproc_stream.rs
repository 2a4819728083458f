//! ext_proc messages from the gateway: `ProcessingRequest` protobuf decoding, then the
//! per-stream state machine over the decoded sequence (headers, bodies, trailers, response
//! side) against two endpoints and the default config.
//!
//! Input: a sequence of `[len: u16 LE][len bytes of protobuf]` records; each record that
//! decodes is handed to one `StreamProcessor`.
#![no_main]

use std::sync::{Arc, OnceLock};

use epp::extproc::service::{ExtProcOptions, Shared};
use epp::extproc::stream::StreamProcessor;
use epp::proto::ext_proc::ProcessingRequest;
use libfuzzer_sys::fuzz_target;
use prost::Message;

struct World {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let shared = runtime.block_on(async {
            let store = epp::endpoints::store::EndpointStore::new();
            let endpoints = epp::endpoints::discovery::parse_endpoints(
                "endpoints:\n- {name: a, address: 10.0.0.1, port: 8000}\n- {name: b, address: 10.0.0.2, port: 8000}\n",
                std::path::Path::new("fuzz"),
            )
            .expect("endpoints");
            store.replace(endpoints);
            let registry = prometheus::Registry::new();
            let cx = epp::framework::build::BuildContext { endpoints: store.clone(), ..Default::default() };
            let loaded = epp::app::load_config(None, &cx, epp::scheduling::metrics::SchedulerMetrics::detached())
                .expect("default config");
            Arc::new(Shared {
                scheduler: epp::scheduling::handle::SchedulerHandle::new(loaded.scheduler),
                store,
                metrics: Arc::new(epp::telemetry::metrics::RequestMetrics::register(&registry).expect("metrics")),
                options: ExtProcOptions { max_body_bytes: 1 << 20, ..Default::default() },
                flow_control: None,
            })
        });
        World { runtime, shared }
    })
}

fuzz_target!(|data: &[u8]| {
    let world = world();
    let mut messages = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        if let Ok(msg) = ProcessingRequest::decode(&rest[2..2 + len]) {
            messages.push(msg);
        }
        rest = &rest[2 + len..];
    }
    world.runtime.block_on(async {
        let mut processor = StreamProcessor::new(world.shared.clone());
        for msg in messages {
            let _ = processor.handle(msg).await;
            if processor.is_closed() {
                break;
            }
        }
        processor.complete();
    });
});
