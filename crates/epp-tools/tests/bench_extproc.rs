//! `epp bench extproc` end to end in process: a short open-loop run per body mode against
//! an epp with simulated pods on loopback; every request must get a valid destination and
//! the report must be coherent. Low rates and short windows: this checks behaviour, the
//! numbers themselves go to docs/benchmarks.md.

#[path = "../../../tests/common/mod.rs"]
mod common;

use clap::Parser;
use epp_tools::bench::extproc::args::{BodyMode, ExtprocArgs};
use epp_tools::bench::extproc::report::RateReport;
use epp_tools::bench::extproc::sweep;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: ExtprocArgs,
}

fn args(flags: &[&str]) -> ExtprocArgs {
    Cmd::try_parse_from(std::iter::once("bench").chain(flags.iter().copied())).expect("flags parse").args
}

fn run(flags: &[&str]) -> Vec<RateReport> {
    let mut streamed = 0;
    let rows = sweep(&args(flags), |_| streamed += 1).expect("bench runs");
    assert_eq!(streamed, rows.len(), "each row is reported as it completes");
    rows
}

fn assert_coherent(r: &RateReport, requests: u64) {
    assert_eq!((r.sent, r.ok, r.errors, r.dropped), (requests, requests, 0, 0), "every request routed: {r:?}");
    assert!(0 < r.p50_us && r.p50_us <= r.p99_us && r.p99_us <= r.p999_us && r.p999_us <= r.max_us, "{r:?}");
    assert!(r.rate_achieved > 0.0 && r.rate_achieved <= r.rate_target * 1.05, "{r:?}");
    assert!(r.cpu_us_per_req.is_some_and(|c| c > 0.0), "epp CPU measured in process: {r:?}");
    assert!(r.process_cpu_us_per_req.is_some(), "{r:?}");
    assert!((900..=1_100).contains(&r.body_bytes), "{r:?}");
}

#[test]
fn full_duplex_run_routes_every_request() {
    let rows =
        run(&["--rates", "100,150", "--duration", "1s", "--warmup", "0s", "--body-size", "1k", "--chunk-size", "300"]);
    assert_eq!(rows.len(), 2);
    assert_coherent(&rows[0], 100);
    assert_coherent(&rows[1], 150);
    assert!(rows.iter().all(|r| r.body_mode == BodyMode::FullDuplex && r.kv_events_per_s == 0.0));
}

#[test]
fn buffered_run_with_kv_ingest_routes_every_request_and_counts_events() {
    let rows = run(&[
        "--rate",
        "150",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--body-mode",
        "buffered",
        "--body-size",
        "1k",
        "--kv-events",
        "4000",
        "--json",
    ]);
    assert_eq!(rows.len(), 1);
    assert_coherent(&rows[0], 150);
    assert!(rows[0].kv_events_per_s > 0.0, "KV events ingested while serving: {:?}", rows[0]);
    let line = serde_json::to_value(&rows[0]).expect("json");
    for field in
        ["rate_target", "rate_achieved", "p50_us", "p99_us", "p999_us", "errors", "cpu_us_per_req", "kv_events_per_s"]
    {
        assert!(line.get(field).is_some(), "JSON line has {field}");
    }
}

#[test]
fn external_target_is_loaded_over_h2c() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (_pod, epp) = rt.block_on(async {
        let pod = common::FakeVllm::start([127, 0, 0, 60], 0, 1, 0.1).await;
        let eps = common::endpoints_yaml(&[("only", pod.addr, &[])]);
        let epp = common::TestEpp::start(&eps, None, |_| {}).await;
        epp.wait_waiting(&[("only", 0)]).await;
        (pod, epp)
    });
    let target = epp.app.grpc_addr.to_string();
    let rows = run(&["--target", &target, "--rate", "100", "--duration", "1s", "--warmup", "0s", "--body-size", "1k"]);
    let r = &rows[0];
    assert_eq!((r.sent, r.ok, r.errors, r.dropped), (100, 100, 0, 0), "{r:?}");
    assert!(r.cpu_us_per_req.is_none() && r.epp_runq_wait_pct.is_none(), "no epp threads in this process: {r:?}");
    assert!(r.process_cpu_us_per_req.is_some(), "{r:?}");
    rt.block_on(epp.app.shutdown());
}

#[test]
fn floor_is_loaded_next_to_epp_at_each_rate_in_both_body_modes() {
    for mode in ["full-duplex", "buffered"] {
        // 100 KB bodies cross the floor's echo in two chunks (62,000-byte limit).
        let rows = run(&[
            "--floor",
            "--rates",
            "100,120",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--body-mode",
            mode,
            "--body-size",
            "100k",
        ]);
        let servers: Vec<_> = rows.iter().map(|r| (r.server, r.rate_target)).collect();
        assert_eq!(servers, [("floor", 100.0), ("epp", 100.0), ("floor", 120.0), ("epp", 120.0)], "{mode}");
        for r in &rows {
            let n = r.rate_target as u64;
            assert_eq!((r.sent, r.ok, r.errors, r.dropped), (n, n, 0, 0), "{mode}: every request answered: {r:?}");
            assert!(r.cpu_us_per_req.is_some_and(|c| c > 0.0), "{mode}: server CPU measured: {r:?}");
        }
        let ratios = epp_tools::bench::extproc::report::floor_ratios(&rows);
        assert_eq!(ratios.lines().filter(|l| l.contains("epp CPU per request")).count(), 2, "{ratios}");
    }
}

#[test]
fn external_target_cpu_is_read_from_its_pid() {
    // This process stands in for the external epp: its CPU is what `--target-pid` reads.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (_pod, epp) = rt.block_on(async {
        let pod = common::FakeVllm::start([127, 0, 0, 61], 0, 1, 0.1).await;
        let eps = common::endpoints_yaml(&[("only", pod.addr, &[])]);
        let epp = common::TestEpp::start(&eps, None, |_| {}).await;
        epp.wait_waiting(&[("only", 0)]).await;
        (pod, epp)
    });
    let (target, pid) = (epp.app.grpc_addr.to_string(), std::process::id().to_string());
    let flags = ["--target", &target, "--target-pid", &pid, "--rate", "100", "--duration", "1s", "--warmup", "0s"];
    let r = &run(&flags)[0];
    assert_eq!((r.sent, r.ok, r.errors), (100, 100, 0), "{r:?}");
    assert!(r.cpu_us_per_req.is_some_and(|c| c > 0.0), "CPU of the pid: {r:?}");
    assert!(r.epp_runq_wait_pct.is_some(), "{r:?}");
    rt.block_on(epp.app.shutdown());
}
