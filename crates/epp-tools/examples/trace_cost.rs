//! Cost of OpenTelemetry spans per decision, for callgrind (instruction counts, not time):
//! `trace_cost <off|RATIO> <iterations>` runs full in-process decisions (the default pipeline
//! over 16 synthetic endpoints, `epp-tools bench decision`'s) inside the spans the ext_proc stream
//! opens (`gateway.request`, `gateway.director.handle_request`, then the scheduler's own), with
//! the OpenTelemetry layer installed and `traceidratio` sampling at RATIO (`off`: no layer, as
//! with `--tracing=false` or no exporter). Spans go through the SDK's batch processor to an
//! exporter that drops them (no serialisation or network). Instructions per decision =
//! difference of two runs' totals / difference of iterations (see docs/observability.md).
//! `trace_cost <off|RATIO> <iterations> --timed` also prints one JSON line with the wall-clock
//! p50/p99 of a decision (spans included) and the process CPU per decision, for a sitting that
//! alternates the modes (a release build; the figures are only comparable within one sitting).

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
    let (mode, iterations, timed) = match args.as_slice() {
        [_, mode, n] => (mode.clone(), n.parse::<usize>()?, false),
        [_, mode, n, flag] if flag == "--timed" => (mode.clone(), n.parse::<usize>()?, true),
        _ => anyhow::bail!("usage: trace_cost <off|RATIO> <iterations> [--timed]"),
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
    let mut durations = Vec::with_capacity(if timed { iterations } else { 0 });
    let cpu_start = process_cpu_seconds();
    for i in 0..iterations {
        let started = std::time::Instant::now();
        let request = epp::telemetry::otel::request_span(&headers);
        let outcome = request.in_scope(|| {
            epp::telemetry::otel::director_span().in_scope(|| {
                epp::extproc::decide::decide(&loaded.scheduler, &store, &headers, &metadata, &bodies[i % 64], true)
            })
        });
        anyhow::ensure!(outcome.is_ok(), "decision failed");
        epp::telemetry::otel::record_pick(&request, Ok("endpoint"));
        drop(request);
        if timed {
            durations.push(started.elapsed());
        }
    }
    if timed {
        let cpu = process_cpu_seconds() - cpu_start;
        durations.sort_unstable();
        let at = |q: f64| durations[((durations.len() as f64 * q) as usize).min(durations.len() - 1)];
        println!(
            "{{\"mode\":\"{mode}\",\"iterations\":{iterations},\"p50_us\":{:.2},\"p99_us\":{:.2},\"cpu_us_per_decision\":{:.2}}}",
            at(0.50).as_secs_f64() * 1e6,
            at(0.99).as_secs_f64() * 1e6,
            cpu * 1e6 / iterations as f64
        );
    }
    if let Some(provider) = provider {
        provider.shutdown()?;
    }
    Ok(())
}

/// CPU time of the whole process (all threads, the batch exporter's included), in seconds.
fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
