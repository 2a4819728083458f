//! Cost of OpenTelemetry spans per decision, for callgrind (instruction counts, not time):
//! `trace_cost <off|RATIO> <iterations>` runs full in-process decisions (the default pipeline
//! over 16 synthetic endpoints, `epp-tools bench decision`'s) inside the spans the ext_proc stream
//! opens (`gateway.request`, `gateway.director.handle_request`, then the scheduler's own), with
//! the OpenTelemetry layer installed and `traceidratio` sampling at RATIO (`off`: no layer, as
//! with `--tracing=false` or no exporter). Spans go through the SDK's batch processor to an
//! exporter that drops them (no serialisation or network). Instructions per decision =
//! difference of two runs' totals / difference of iterations (see docs/observability.md).

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};

/// Drops every batch.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::hint::black_box(batch);
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (mode, iterations) = match args.as_slice() {
        [_, mode, n] => (mode.clone(), n.parse::<usize>()?),
        _ => anyhow::bail!("usage: trace_cost <off|RATIO> <iterations>"),
    };
    let options = epp::telemetry::tracing::LogOptions {
        format: epp::telemetry::tracing::LogFormat::Json,
        level: "info",
        time_encoding: Default::default(),
    };
    let provider = match mode.as_str() {
        "off" => None,
        ratio => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(Discard)
                .with_sampler(Sampler::TraceIdRatioBased(ratio.parse()?))
                .build(),
        ),
    };
    epp::telemetry::tracing::init_with_spans(&options, provider.as_ref());

    let (store, loaded) = epp_tools::bench::synthetic::default_pipeline(16)?;
    let headers = epp::request::headers::RequestHeaders { all: vec![(":path".into(), "/v1/chat/completions".into())] };
    let metadata = Default::default();
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| epp_tools::bench::synthetic::chat_body(2048, i % 8, i)).collect();
    for i in 0..iterations {
        let request = epp::telemetry::otel::request_span(&headers);
        let outcome = request.in_scope(|| {
            epp::telemetry::otel::director_span().in_scope(|| {
                epp::extproc::decide::decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % 64], true)
            })
        });
        anyhow::ensure!(outcome.is_ok(), "decision failed");
        epp::telemetry::otel::record_pick(&request, Ok("endpoint"));
    }
    if let Some(provider) = provider {
        provider.shutdown()?;
    }
    Ok(())
}
