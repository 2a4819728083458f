//! `epp bench extproc`: an open-loop ext_proc load generator. Requests go on a fixed
//! schedule, each as its own ext_proc stream (headers, body chunks, end of stream) to an epp
//! started in process on loopback (default, with simulated pods) or to `--target`; it reports
//! per offered rate the decision latency p50/p99/p99.9 from the scheduled send time, errors,
//! drops, CPU per request and KV events ingested, plus the max sustained rate.
//!
//! Parts: `args` (flags), `workload` (message sequences), `transaction` (one stream),
//! `open_loop` (one rate), `target` (the epp under load), `pods` and `kv_events` (simulated
//! pods and their KV-event load), `cpu` (CPU accounting), `report` (rows, table, max rate).

pub mod args;
pub mod cpu;
pub mod kv_events;
pub mod open_loop;
pub mod pods;
pub mod report;
pub mod target;
pub mod transaction;
pub mod workload;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};

use args::ExtprocArgs;
use open_loop::{Requests, Step};
use report::RateReport;
use target::Target;

/// Thread-name prefix of the load generator (client runtime and dispatcher).
const CLIENT_THREADS: &str = "bench-cli";

/// Runs the benchmark and prints the table (or JSON lines) and the max sustained rate.
pub fn run(args: &ExtprocArgs) -> anyhow::Result<()> {
    let reports = sweep(args, |r| {
        if args.json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
    })?;
    if !args.json {
        print!("{}", report::table(&reports));
        match report::max_sustained(&reports) {
            Some(rate) => println!("max sustained rate: {rate:.0}/s (p99 <= {} ms)", args.slo_ms),
            None => println!("max sustained rate: none of the offered rates (p99 <= {} ms)", args.slo_ms),
        }
        if args.target.is_none() {
            println!(
                "epp us/r: CPU of the in-process epp's threads; proc us/r: whole process (epp + load generator + simulated pods)"
            );
        }
    }
    Ok(())
}

/// Runs the warm-up and every rate, calling `each` as rows complete; returns all rows.
pub fn sweep(args: &ExtprocArgs, mut each: impl FnMut(&RateReport)) -> anyhow::Result<Vec<RateReport>> {
    args.check().map_err(anyhow::Error::msg)?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()?;
    let target = Target::start(args)?;
    let result = (|| {
        let channels = client.block_on(connect(target.addr, args.connections))?;
        let requests = Requests {
            channels,
            workload: Arc::new(workload::Workload::new(args.body_mode, args.body_size, args.chunk_size)),
            destinations: target.destinations.clone().map(Arc::new),
        };
        let rates = args.rate_list();
        if !args.warmup.is_zero() {
            open_loop::run(client.handle(), &requests, &step(args, rates[0], args.warmup));
        }
        let mut reports = Vec::new();
        for rate in rates {
            let row = measure(args, &target, &client, &requests, rate);
            if let Some(e) = &row.1 {
                eprintln!("rate {rate}: first error: {e}");
            }
            each(&row.0);
            reports.push(row.0);
        }
        Ok(reports)
    })();
    target.shutdown();
    client.shutdown_background();
    result
}

fn step(args: &ExtprocArgs, rate: f64, duration: std::time::Duration) -> Step {
    Step { rate, duration, concurrency: args.concurrency, timeout: args.timeout, mode: args.body_mode }
}

/// One rate: the step plus CPU and KV-ingest deltas around it.
fn measure(
    args: &ExtprocArgs,
    target: &Target,
    client: &tokio::runtime::Runtime,
    requests: &Requests,
    rate: f64,
) -> (RateReport, Option<String>) {
    let server_threads = target.server_threads.as_deref().unwrap_or("-");
    let prefixes = [server_threads, CLIENT_THREADS];
    let (cpu0, kv0, t0) = (cpu::CpuSample::now(&prefixes), target.kv_blocks_applied(), Instant::now());
    let r = open_loop::run(client.handle(), requests, &step(args, rate, args.duration));
    let (cpu1, kv1, wall) = (cpu::CpuSample::now(&prefixes), target.kv_blocks_applied(), t0.elapsed());
    let cpu = cpu1.since(&cpu0, server_threads);
    let per_req = |d: Option<std::time::Duration>| d.filter(|_| r.ok > 0).map(|d| d.as_secs_f64() * 1e6 / r.ok as f64);
    let h = &r.latency_us;
    let mut row = RateReport {
        body_mode: args.body_mode,
        body_bytes: requests.workload.body_bytes(),
        rate_target: rate,
        rate_achieved: r.ok as f64 / r.elapsed.as_secs_f64().max(1e-9),
        sent: r.sent,
        ok: r.ok,
        errors: r.errors,
        dropped: r.dropped,
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        cpu_us_per_req: target.server_threads.as_ref().and_then(|_| per_req(cpu.threads)),
        process_cpu_us_per_req: per_req(cpu.process),
        epp_runq_wait_pct: target
            .server_threads
            .as_ref()
            .and(cpu.waited)
            .map(|w| 100.0 * w.as_secs_f64() / wall.as_secs_f64().max(1e-9)),
        kv_events_per_s: (kv1 - kv0).max(0.0) / wall.as_secs_f64().max(1e-9),
        sustained: false,
    };
    row.judge(args.slo_ms * 1000.0);
    (row, r.first_error)
}

/// `n` HTTP/2 (h2c) connections to the epp.
async fn connect(addr: std::net::SocketAddr, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::with_capacity(n);
    for _ in 0..n {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(16 << 20));
        channels.push(endpoint.connect().await.with_context(|| format!("connecting to {addr}"))?);
    }
    Ok(channels)
}
