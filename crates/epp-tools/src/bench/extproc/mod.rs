//! `epp bench extproc`: an open-loop ext_proc load generator. Requests go on a fixed
//! schedule, each as its own ext_proc stream (headers, body chunks, end of stream) to an epp
//! started in process on loopback (default, with simulated pods) or to `--target`; it reports
//! per offered rate the decision latency p50/p99/p99.9 from the scheduled send time, errors,
//! drops, CPU per request and KV events ingested, plus the max sustained rate.
//!
//! With `--floor` a no-op ext_proc server (`floor`) is loaded at each rate too, next to epp.
//!
//! Parts: `args` (flags), `floor` (the no-op server), `workload` (message sequences), `transaction` (one stream),
//! `open_loop` (one rate), `target` (the epp under load), `pods` and `kv_events` (simulated
//! pods and their KV-event load), `cpu` (CPU accounting), `report` (rows, table, max rate).

pub mod args;
pub mod cpu;
pub mod floor;
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
use target::{CpuSource, Target};

/// Thread-name prefix of the load generator (client runtime and dispatcher).
const CLIENT_THREADS: &str = "bench-cli";

/// Runs the benchmark and prints the table (or JSON lines) and the max sustained rate; with
/// `--floor`, per server and as ratios of epp to the floor.
pub fn run(args: &ExtprocArgs) -> anyhow::Result<()> {
    let reports = sweep(args, |r| {
        if args.json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
    })?;
    if args.json {
        return Ok(());
    }
    print!("{}", report::table(&reports));
    for server in ["floor", "epp"] {
        let rows: Vec<RateReport> = reports.iter().filter(|r| r.server == server).cloned().collect();
        if rows.is_empty() {
            continue;
        }
        match report::max_sustained(&rows) {
            Some(rate) => println!("{server}: max sustained rate {rate:.0}/s (p99 <= {} ms)", args.slo_ms),
            None => println!("{server}: max sustained rate: none of the offered rates (p99 <= {} ms)", args.slo_ms),
        }
    }
    if args.floor {
        print!("{}", report::floor_ratios(&reports));
    }
    println!(
        "server us/r: CPU of the server's threads (in process) or process (--target-pid); proc us/r: this whole process"
    );
    Ok(())
}

/// Runs the warm-up and every rate (floor then epp at each rate with `--floor`), calling `each`
/// as rows complete; returns all rows.
pub fn sweep(args: &ExtprocArgs, mut each: impl FnMut(&RateReport)) -> anyhow::Result<Vec<RateReport>> {
    args.check().map_err(anyhow::Error::msg)?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()?;
    let mut targets = Vec::new();
    let started = (|| {
        if args.floor {
            targets.push(Target::start_floor(args)?);
        }
        targets.push(Target::start(args)?);
        anyhow::Ok(())
    })();
    let result = started.and_then(|()| {
        let workload =
            Arc::new(workload::Workload::new(args.body_mode, args.body_shape, args.body_size, args.chunk_size));
        let mut loads = Vec::new();
        for target in &targets {
            let requests = Requests {
                channels: client.block_on(connect(target.addr, args.connections))?,
                workload: workload.clone(),
                destinations: target.destinations.clone().map(Arc::new),
            };
            loads.push((target, requests));
        }
        let rates = args.rate_list();
        if !args.warmup.is_zero() {
            for (_, requests) in &loads {
                open_loop::run(client.handle(), requests, &step(args, rates[0], args.warmup));
            }
        }
        let mut reports = Vec::new();
        for rate in rates {
            for (target, requests) in &loads {
                let row = measure(args, target, &client, requests, rate);
                if let Some(e) = &row.1 {
                    eprintln!("{} at rate {rate}: first error: {e}", target.name);
                }
                each(&row.0);
                reports.push(row.0);
            }
        }
        Ok(reports)
    });
    for target in targets {
        target.shutdown();
    }
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
    let server_cpu = || match &target.cpu {
        CpuSource::Threads(prefix) => Some((cpu::CpuSample::now(&[prefix.as_str()]), prefix.as_str())),
        CpuSource::Process(pid) => Some((cpu::CpuSample::of_pid(*pid), "")),
        CpuSource::Unknown => None,
    };
    let (server0, own0) = (server_cpu(), cpu::CpuSample::now(&[]));
    let (kv0, t0) = (target.kv_blocks_applied(), Instant::now());
    let r = open_loop::run(client.handle(), requests, &step(args, rate, args.duration));
    let (server1, own1) = (server_cpu(), cpu::CpuSample::now(&[]));
    let (kv1, wall) = (target.kv_blocks_applied(), t0.elapsed());
    let server = server0.zip(server1).map(|((a, prefix), (b, _))| b.since(&a, prefix));
    let own = own1.since(&own0, "");
    let per_req = |d: Option<std::time::Duration>| d.filter(|_| r.ok > 0).map(|d| d.as_secs_f64() * 1e6 / r.ok as f64);
    let h = &r.latency_us;
    let mut row = RateReport {
        server: target.name,
        body_mode: args.body_mode,
        body_shape: args.body_shape,
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
        cpu_us_per_req: server.and_then(|c| per_req(c.threads)),
        process_cpu_us_per_req: per_req(own.process),
        epp_runq_wait_pct: server
            .and_then(|c| c.waited)
            .map(|w| 100.0 * w.as_secs_f64() / wall.as_secs_f64().max(1e-9)),
        parks_per_req: server.and_then(|c| c.parks).filter(|_| r.ok > 0).map(|n| n as f64 / r.ok as f64),
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
