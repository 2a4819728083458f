//! `sim --wire --wire-processes`: every epp replica is a real `epp` OS process started with a
//! deployment's flags (`--config-file`, `--endpoints-file`, `--replica-sync-url` ...), scraping
//! the simulated pods over HTTP, answering ext_proc over loopback TCP, and sharing routing
//! history through a real redis-server (`--replica-sync auto`). On the default shared-prefix
//! workload two synced processes route as one: their hit rate clearly beats two unsynced
//! ones (release build, seeds 1 and 2: 64-65 % against 49-50 %).
//!
//! The `epp` binary is the one `cargo test --workspace` builds beside `epp-tools` (the root
//! package's integration tests need it). Bounded: 2 runs of 120 requests at twice real time
//! (3 s each), every setup wait inside the tool capped at 30 s.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn epp_binary() -> PathBuf {
    let beside = PathBuf::from(env!("CARGO_BIN_EXE_epp-tools")).with_file_name("epp");
    assert!(beside.is_file(), "{} missing: run `cargo test --workspace` (or `cargo build -p epp`)", beside.display());
    beside
}

fn sim(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_epp-tools"))
        .arg("sim")
        .args(["--pods=4", "--requests=120", "--seed=1", "--wire", "--wire-speed=2", "--wire-processes"])
        .args(extra)
        .env_remove("EPP_BIN")
        .output()
        .expect("epp-tools runs")
}

#[test]
fn two_synced_epp_processes_route_as_one() {
    let bin = epp_binary();
    let out = sim(&["--replicas=2", "--replica-sync=auto", "--json", &format!("--epp-bin={}", bin.display())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let rows = json["replica_runs"].as_array().expect("replica_runs");
    let summary = serde_json::to_string_pretty(rows).unwrap_or_default();
    assert_eq!(rows.len(), 2, "2 replicas, without and with sync: {summary}");
    let row = |n: u64, sync: bool| {
        rows.iter().find(|r| r["replicas"] == n && r["sync"] == sync).unwrap_or_else(|| panic!("row {n} {sync}"))
    };
    for r in rows {
        assert_eq!(r["run"]["completed"], 120, "no request failed: {summary}");
    }
    let hit = |n, sync| row(n, sync)["run"]["hit_rate"].as_f64().expect("hit rate");
    assert!(hit(2, true) > hit(2, false) + 0.05, "sync raises two processes' hit rate: {summary}");
    let synced = &row(2, true)["sync_stats"];
    // Read from the processes' own /metrics.
    assert!(synced["sent"].as_u64() >= Some(120), "one prefix update per decision: {summary}");
    assert!(synced["applied"].as_u64() >= Some(120), "each applied the other's: {summary}");
    assert!(synced["lag_samples"].as_u64() > Some(0), "lag measured: {summary}");
    assert_eq!(row(2, false)["sync_stats"]["sent"], 0, "{summary}");
}

#[test]
fn a_missing_epp_binary_is_a_clear_error() {
    let out = sim(&["--epp-bin=/nonexistent/epp", "--policy=approximate"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/epp") && stderr.contains("cargo build -p epp"), "{stderr}");
}
